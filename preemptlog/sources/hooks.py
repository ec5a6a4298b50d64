"""Placeholder: the hooks source (being written)."""
