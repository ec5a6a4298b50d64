"""SGLang: its log kind (retraction, batch and start-up lines), knobs, summary words and fixes."""

from . import source

__all__ = ["source"]
