"""The Host agent and its tools (and the orchestration guide it reads)."""
