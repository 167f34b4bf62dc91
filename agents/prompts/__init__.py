"""The specialists' system prompts, one Markdown file each (loaded by agents.specialists)."""
