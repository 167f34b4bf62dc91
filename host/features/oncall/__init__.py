"""Oncall in conversations: campaign tools, the decider, notices, command approval."""
