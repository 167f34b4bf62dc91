"""Conversations: the service (message → record → lane → turn → reply), lanes, the outbox,
scheduled turns, run announcements, prompt decisions (typed answers, what a decision does)."""
