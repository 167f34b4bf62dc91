"""One list of secret names for every scrubber: a name the settings declare secret is withheld
from agent commands and campaign rounds alike, whatever it is called."""

from __future__ import annotations

import contextvars

from agents.process import scrub_env
from core.secret_names import looks_secret, withhold_secret_names
from oncall.machines.common import round_env

ENVIRON = {"PATH": "/usr/bin", "MATRIX_PASSPHRASE": "hunter2", "RAVEN_HOME": "/srv/raven"}


def _scrubbed() -> tuple[dict[str, str], dict[str, str]]:
    withhold_secret_names(["matrix_passphrase"])
    allow = ["MATRIX_PASSPHRASE", "RAVEN_HOME"]
    return scrub_env(ENVIRON, allow=allow), round_env(ENVIRON, allow=allow)


def test_a_declared_secret_is_withheld_by_every_scrubber() -> None:
    assert not looks_secret("MATRIX_PASSPHRASE")  # an unusual name: the pattern misses it
    agent, rounds = contextvars.copy_context().run(_scrubbed)
    assert "MATRIX_PASSPHRASE" not in agent and "MATRIX_PASSPHRASE" not in rounds
    assert "RAVEN_HOME" not in rounds and rounds["PATH"] == "/usr/bin"
    assert not looks_secret("MATRIX_PASSPHRASE")  # declared in that context only
