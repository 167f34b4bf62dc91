"""The nudge policy over everything the bot says on its own: caps, dedup and quiet hours."""
