"""The README's configuration files written into RAVEN_HOME as the README shows them:
`doctor` accepts them, the bot starts with them and does what they say, and
`raven-bot graph validate` reads agents from them.

Substituted, because they cannot exist here: machines.toml's `/srv/projects/toy` (the local
machine's workdir) and `/data/imagenet` (its read-only mount) become directories of this
test. Kept as written: the `gpu-box.internal` ssh host and the `cluster` Slurm controller do
not exist here either, and the README promises that an unreachable machine is reported, not
fatal (`doctor` warns; the bot starts); `my-review-tool` is not installed, so the README's
`reviewer` agent is disabled with the reason."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.acceptance.harness import WITHIN, Result, noise, product_env, project_dir, sh

AGENTS_TOML = """\
[agents.reviewer]
backend = "cli"                   # inproc | cli | api | acp (acp: not supported yet)
description = "Reviews a diff and lists problems."
command = ["my-review-tool", "--stdin"]
prompt_via = "stdin"              # or "arg"
file_capable = true
timeout_seconds = 600

[agents.code]
enabled = false                   # switch a default agent off

[agents.shell]
# Shell-style globs matched against the whole command (`*`, `?`, `[...]`). A command with
# `;` `&` `|` `<` `>` a backtick, `$(` or a newline always asks, whatever the patterns.
allow = ["ls", "ls *", "echo *", "python3 -m pytest*"]"""

PERMISSIONS_TOML = """\
[default]
mode = "smart"
deny = ["run_shell:curl * | sh"]

[workspace."T0123"]
mode = "ask-everything"
allow = ["run_shell:pytest*", "run_shell:git status"]"""

MACHINES_TOML = """\
[machines.local]
kind = "local"
workdir = "/srv/projects/toy"   # chat campaigns run here (writable); else the workspace
mounts = ["/data/imagenet"]     # also readable (read-only) by every round on this machine

[machines.gpu-box]
kind = "ssh"          # the system ssh, BatchMode; commands run in `workdir` on that host
host = "gpu-box.internal"
user = "ml"
workdir = "/scratch/project"    # logs and exit codes go to ~/raven-rounds/ there
slots = 2

users = ["U0123", "U0456"]   # who may run rounds here ("*": everyone); roles = [...] too
approvers = ["U0999"]        # whose approval every command here also needs

[machines.cluster]
kind = "slurm"        # sbatch / squeue / scontrol / scancel on this host (shared filesystem)
partition = "debug"
workdir = "/shared/project"     # RAVEN_HOME/campaigns/ must be shared with the nodes too
slots = 8
user_slots = 2        # one person's campaigns hold at most 2 of the 8 slots
roles = ["1122334455"] # Discord role ids whose members may use it"""

README_EXAMPLES = [
    AGENTS_TOML,
    PERMISSIONS_TOML,
    MACHINES_TOML,
    "raven-bot graph validate FILE.json [--agents FILE]",
    ".venv/bin/raven-bot doctor",
    "raven-bot doctor",
]


VALIDATIONS = (
    "raven-bot graph validate code.json",
    "raven-bot graph validate code.json --agents defaults.toml",
)


def _graph(agent: str, task: str) -> str:
    """A graph submission file (host/guides/orchestration.md's format), one node."""
    node = {"id": "n1", "agent": agent, "template": task, "deps": [], "inputs": {}}
    return json.dumps({"task_summary": f"one {agent} node", "nodes": [node]})


@dataclass
class Setup:
    home: Path
    project: Path
    env: dict[str, str]
    pool: ThreadPoolExecutor
    shown: list[tuple[str, str]] = field(default_factory=list)
    validated: dict[str, Future[Result]] = field(default_factory=dict)

    def sh(self, command: str, stdin: str = "") -> Result:
        """Run a README command line from the project directory; keep what it showed."""
        result = sh(command, env=self.env, cwd=self.project, stdin=stdin)
        self.shown.append((command, result.both))
        return result


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("readme-configuration")
    home = root / "raven-home"
    home.mkdir()
    (home / "agents.toml").write_text(AGENTS_TOML + "\n")
    (home / "permissions.toml").write_text(PERMISSIONS_TOML + "\n")
    toy, data = root / "toy", root / "imagenet"
    toy.mkdir()
    data.mkdir()
    machines = MACHINES_TOML.replace("/srv/projects/toy", str(toy))
    (home / "machines.toml").write_text(machines.replace("/data/imagenet", str(data)) + "\n")
    project = project_dir(root / "project")
    (project / "code.json").write_text(_graph("code", "write hello.py"))
    (project / "defaults.toml").write_text("# no agents of mine: the defaults\n")
    with ThreadPoolExecutor(max_workers=2) as pool:
        setup = Setup(home, project, product_env(home), pool)
        # `graph validate` reads no database: it runs meanwhile, in the background.
        for command in VALIDATIONS:
            setup.validated[command] = pool.submit(setup.sh, command)
        yield setup


def test_doctor_accepts_the_readme_configuration(setup: Setup) -> None:
    result = setup.sh(".venv/bin/raven-bot doctor")
    # "the exit code is non-zero only when a required check fails"; "Offline mode is a
    # warning, not a failure"
    assert result.code == 0, result.both
    assert "[FAIL]" not in result.out, result.out
    assert re.search(rf"RAVEN_HOME +{re.escape(str(setup.home))}", result.out), result.out
    # "one line per check (data dir, database, scheduler store, agents.toml, machines.toml,
    # permissions.toml, skills, unknown settings, libraries, embedder and recall mode, model,
    # each chat platform, channels, sandbox)"
    lines = {
        m["check"]: m["text"]
        for m in re.finditer(
            r"^ *\[(?:ok  |WARN)\] +(?P<check>\w+(?: \w+)?) {2,}(?P<text>.*)$",
            result.out,
            re.MULTILINE,
        )
    }
    checks = ("data dir", "database", "scheduler store", "agents", "machines", "permissions")
    checks += ("skills", "settings", "libraries", "embedder", "model", "slack", "discord")
    checks += ("channels", "sandbox")
    assert all(check in lines for check in checks), (set(checks) - set(lines), result.out)
    assert "offline" in lines["model"] and "MiniLM" in lines["embedder"], result.out
    agents = lines["agents"]
    assert str(setup.home / "agents.toml") in agents, agents
    assert "code" in agents and "reviewer" in agents and "my-review-tool" in agents, agents
    assert all(m in lines["machines"] for m in ("local", "gpu-box", "cluster")), result.out
    assert str(setup.home / "permissions.toml") in lines["permissions"], result.out
    assert "1 deny" in lines["permissions"], result.out


def test_the_bot_starts_with_it_and_does_what_it_says(setup: Setup) -> None:
    # Piped, so no approval can be answered: the allow list must let `echo *` run unasked;
    # `code` is switched off; `reviewer` has no binary here.
    lines = [
        "l1: shell: echo allowed by the list",
        "",
        "c1: code: write hello.py",
        "",
        "r1: reviewer: review the diff",
        "",
    ]
    result = setup.sh(".venv/bin/raven-bot chat", stdin="\n".join(lines) + "\n")
    assert result.code == 0, result.both
    out = result.out
    assert re.search(r"Output of `?l1`?\W*\n\s*allowed by the list", out), out
    assert "Run this graph?" not in out and "wants to run this command" not in out, out
    assert re.search(r"agent `?code`? is disabled", out), out
    assert re.search(r"agent `?reviewer`? is disabled", out), out


def test_graph_validate_reads_agents_from_raven_home_or_the_given_file(setup: Setup) -> None:
    refused, admitted = (setup.validated[c].result(timeout=WITHIN) for c in VALIDATIONS)
    # RAVEN_HOME/agents.toml switches `code` off: "the first error (exit 2)" names it.
    assert refused.code == 2, refused.both
    assert "n1" in refused.out and "code" in refused.out and "disabled" in refused.out
    # `--agents FILE` reads that file instead (here: no agents of its own, the defaults).
    assert admitted.code == 0, admitted.both
    assert admitted.out.startswith("admitted"), admitted.out


def test_what_people_read_is_clean(setup: Setup) -> None:
    # `doctor` and the console, in a terminal: both streams are read.
    found = [f"[{what}] {line}" for what, text in setup.shown for line in noise(text)]
    assert not found, "\n".join(found[:20])
