"""What every sandbox (the local one and the confined remote rounds) shows of the system.

Shared so the local sandbox (agents/) and remote rounds (oncall/) cannot drift apart.
"""

from __future__ import annotations

from typing import Final

# The read-only system view: enough to run shells, interpreters and installed CLIs.
SYSTEM_PATHS: Final = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
)
# Files under a bound system path that can hold credentials; replaced by an empty file.
HIDDEN_FILES: Final = ("/etc/shadow", "/etc/gshadow", "/etc/sudoers")
