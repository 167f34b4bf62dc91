"""The campaign engine's tables (oncall/), declared for its feature.

Here, in the feature's folder, so the schema finds them without importing the runtime.
"""

from __future__ import annotations

from oncall.migrations import MIGRATIONS

__all__ = ["MIGRATIONS"]
