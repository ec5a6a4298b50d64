"""SGLang's scheduler constants and defaults, read from its released wheels (cited per value).

The new-token ratio is SGLang's admission estimate: a prefill is admitted only while every
running request can still grow by ``min(remaining max_new_tokens, 4096) x ratio`` tokens
(schedule_policy.py ``PrefillAdder``). The ratio starts at ``init``, decays linearly to its
``floor`` while no retraction happens, and a retraction sets it to the running batch's own
estimate ``(decoded + 20 x n) / (sum of max_new_tokens + 1)``:

- 0.3.6 to 0.5.23: ``init = min(0.7 x c, 1)``, ``floor = init x 0.14``, decay ``(init - floor) / 600``
  per decode step (c = ``--schedule-conservativeness``; the 0.7, 0.14 and 600 are the env vars
  ``SGLANG_INIT_NEW_TOKEN_RATIO``, ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR``,
  ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS``: global_config.py 0.3.6-0.4.10, environ.py 0.5.23:646-649,
  scheduler_components/new_token_ratio_tracker.py 0.5.23);
- 0.2.0: ``floor = min(0.2 x c, 1)``, decay 0.001 per step, init 0.7 (global_config.py 0.2.0:19-22,
  managers/controller/tp_worker.py 0.2.0:163-170).

With ``--enable-dp-attention`` SGLang multiplies c by 0.3 before logging ``server_args``
(server_args.py 0.3.6:193, 0.4.6:291, 0.5.10:2639; arg_groups/parallel_hook.py 0.5.23:318), so the
value the log shows is the one in force.
"""

from __future__ import annotations

DEFAULT_CONSERVATIVENESS = 1.0  # server_args.py 0.2.0:32 ... arg_groups/fields/schedule.py 0.5.23:139
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20  # global_config.retract_decode_steps / SGLANG_RETRACT_DECODE_STEPS
OLD_MIN_RATIO_PER_CONSERVATIVENESS = 0.2  # 0.2.0 base_min_new_token_ratio
MAX_NEW_TOKENS_CLIP = 4096  # schedule_policy.py CLIP_MAX_NEW_TOKENS_ESTIMATION (0.4.6:38)

# SGLang's own tuning advice (docs/advanced_features/hyperparameter_tuning.md, quoted in sglang-facts.md):
# frequent "KV cache pool is full. Retract requests." -> raise --schedule-conservativeness to about 1.3;
# "occasionally but not frequently (~1 time per minute), it is okay"; keep 5-8 GB available_gpu_mem when
# raising --mem-fraction-static, in 0.01 steps.
DOCS_CONSERVATIVENESS = 1.3
DOCS_OK_PER_MINUTE = 1.0
DOCS_KEEP_AVAILABLE_GB = 8.0  # the upper end of "5-8 GB": the fix keeps the safer margin
DOCS_MEM_FRACTION_STEP = 0.01
DOCS_CHUNKED_PREFILL_FLOOR = 2048  # "try reducing --chunked-prefill-size to 4096 or 2048"

# The conservativeness above which the ratio cannot rise further: init = min(0.7 x c, 1) is 1 from here.
MAX_USEFUL_CONSERVATIVENESS = 1.0 / INIT_NEW_TOKEN_RATIO


def ratio_init(c: float) -> float:
    """The new-token ratio after start-up or an idle batch (0.3.6+)."""
    return min(INIT_NEW_TOKEN_RATIO * c, 1.0)


def ratio_floor(c: float, old: bool = False) -> float:
    """Where the decaying ratio stops: ``min(0.7 c, 1) x 0.14`` (0.3.6+), ``min(0.2 c, 1)`` (0.1-0.2)."""
    if old:
        return min(OLD_MIN_RATIO_PER_CONSERVATIVENESS * c, 1.0)
    return min(ratio_init(c) * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)


# Defaults the configuration frame shows where an SGLang log is silent (status "default": an
# assumption, never evidence). (key, value, note)
DEFAULTS: list[tuple[str, str, str]] = [
    (
        "schedule_conservativeness",
        "1.0",
        "SGLang default (server_args.py; 0.5.23 arg_groups/fields/schedule.py:139); not seen in the log",
    ),
    (
        "retraction_policy",
        "length",
        "SGLang default (0.5.23 arg_groups/fields/schedule.py:126: retracts short-output, long-input requests "
        "first); the only order before --retraction-policy existed",
    ),
]
