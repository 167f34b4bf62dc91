"""The Host's runtime: events, the scheduling port, messages, ports, turns, people."""
