"""Graph runtime: submission model, admission, rendering, execution, judging, records."""
