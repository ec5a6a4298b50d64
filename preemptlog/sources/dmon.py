"""Placeholder: the dmon source (being written)."""
