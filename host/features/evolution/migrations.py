"""Harness evolution's tables (host/evaluation/evolution/): its runs and the harness versions
the runtime loads at open.

Here, in the feature's folder, so the schema finds them without importing the runtime.
"""

from __future__ import annotations

from host.evaluation.evolution.migrations import MIGRATIONS

__all__ = ["MIGRATIONS"]
