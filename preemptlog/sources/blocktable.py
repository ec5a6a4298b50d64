"""Placeholder: the blocktable source (being written)."""
