"""Interpretation of vLLM log records: stats series, configuration, requests, preemptions."""
