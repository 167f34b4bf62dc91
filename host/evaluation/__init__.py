"""Measuring the Host: planning against reference graphs (`maob`)."""
