"""Prompts: the broker (buttons and typed answers), their records and handlers, clarification."""
