"""Harness evolution (paper §4, Eqs. 43–56): a specialist's editable harness improved from
evidence: diagnosed proposals screened by a paired gain on a shared task subset, confirmed on
the whole training set, kept one per gene-bank cell; durable in SQLite and resumable."""
