"""A round that died because the file its command runs is not there: what the shell or the
interpreter said, read from the round's last output lines.

Such a round can only fail the same way again, so the offline policy reports the campaign
instead of resubmitting it. The lines are the job's own words (untrusted): the worst a job
can do by printing one is end its own campaign, which it could do by failing anyway.
"""

from __future__ import annotations

import re

# Fixed, anchored patterns on at most a few lines of text: linear to match.
_PYTHON = re.compile(r"can't open file '([^'\n]{1,300})': \[Errno 2\] No such file or directory")
# bash: `bash: run.sh: No such file or directory`; dash: `sh: 1: ./x: not found`.
_SHELL = re.compile(
    r"^(?:[^:\n]{1,100}: )?(?:(?:line )?\d{1,6}: )?([^\s:]{1,300}): "
    r"(?:No such file or directory|not found)$",
    re.MULTILINE,
)


def missing_file(output_tail: str) -> str | None:
    """The file a died round's output says was not found, or None."""
    for pattern in (_PYTHON, _SHELL):
        if found := pattern.search(output_tail):
            return found[1].rsplit("/", 1)[-1]
    return None
