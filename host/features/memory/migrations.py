"""The memory capability's tables (memory/), declared for its feature.

Here, in the feature's folder, so the schema finds them without importing the runtime.
"""

from __future__ import annotations

from memory.migrations import MIGRATIONS

__all__ = ["MIGRATIONS"]
