"""Evidence declarations (moved to model/evidence.py, below the engines, which declare evidence of
their own: engines.EvidenceSection); the joiner's sections import them from here."""

from __future__ import annotations

from ..model.evidence import DOC_BEGIN, DOC_END, DTYPES, SCOPES, Evidence, cited, docs_table, schema, write_docs

__all__ = ["DOC_BEGIN", "DOC_END", "DTYPES", "SCOPES", "Evidence", "cited", "docs_table", "schema", "write_docs"]
