"""Placeholder: the prometheus source (being written)."""
