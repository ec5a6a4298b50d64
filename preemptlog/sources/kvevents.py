"""Placeholder: the kvevents source (being written)."""
