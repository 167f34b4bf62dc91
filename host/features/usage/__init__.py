"""Usage and budgets: every model call's tokens and cost, and daily limits per person and
channel."""
