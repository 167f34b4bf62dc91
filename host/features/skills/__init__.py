"""Skill Forge in conversations: the store, context blocks, prefetch, the gate's completer,
experience."""
