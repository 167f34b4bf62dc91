"""Core value types shared by every layer (the lowest layer: imports nothing of ours)."""
