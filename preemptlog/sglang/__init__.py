"""SGLang, the second engine: its log facts (retractions, stats, configuration) and its knobs.

SGLang's scheduler *retracts* running requests when the KV pool cannot hold the next decode
step (``update_running_batch``: ``check_decode_mem`` failed), as vLLM *preempts* them: the
requests go back to the waiting queue and are prefilled again later. Modules:

- ``knobs.py``: the constants and defaults of SGLang's scheduler that the analysis reasons
  with (new-token ratio, conservativeness, SGLang's own tuning advice), each cited to the
  released source it was read from;
- ``log.py``: the SGLang line families, read by the single log pass (sources/sglang_log.py
  registers their markers), turned into retraction events, stats rows and configuration rows.
"""
