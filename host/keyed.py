"""Per-key locks and ordered per-key tasks now live in `core.keyed` (shared by every layer)."""

from core.keyed import KeyedLocks, KeyedSerial

__all__ = ["KeyedLocks", "KeyedSerial"]
