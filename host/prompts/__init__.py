"""Prompts: the broker façade (buttons and typed answers) and its parts, clarification."""
