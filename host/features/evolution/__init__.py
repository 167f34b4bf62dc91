"""Harness evolution started from chat by admins, with promotion by an approval prompt."""
