"""Capturing evidence from a live vLLM: the in-engine plugin and the /metrics scraper.

Import-light on purpose: vLLM loads ``vllm_plugin`` in every process it starts, so nothing here
imports vLLM, polars or the analysis stack at module level.
"""
