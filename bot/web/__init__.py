"""The read-only web viewer of runs, campaigns and scheduled work, reached through signed,
expiring links posted in a conversation (every action stays in chat)."""
