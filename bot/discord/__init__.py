"""The Discord adapter (discord.py): the only package that knows Discord."""
