"""engines/vllm/config._extracted runs every extractor in one query. Its oracle is the loop it
replaced (a query per extractor, on its kind's rows), on real config lines of every kind and on
generated mixtures of them: the same rows in the same order (extractor, then line)."""

from __future__ import annotations

import datetime as dt

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from preemptlog.engines.vllm.config import EXTRACTORS, _extracted

T0 = dt.datetime(2026, 11, 20, 8, 0, 0, tzinfo=dt.UTC)

LINES = [
    (
        "cfg_engine",
        "Initializing a V0 LLM engine (v0.6.3.post1) with config: model='Qwen/Qwen2-7B', "
        "speculative_config=None, max_seq_len=32768, tensor_parallel_size=2, pipeline_parallel_size=1, "
        "enable_prefix_caching=True, use_v2_block_manager=True, num_scheduler_steps=1, "
        "chunked_prefill_enabled=False, kv_cache_dtype=auto, quantization=None, ",
    ),
    (
        "cfg_engine",
        "Initializing a V1 LLM engine (v0.11.0) with config: model='m', max_seq_len=4096, "
        "enable_chunked_prefill=True, speculative_config=SpeculativeConfig(method='ngram', num_spec_tokens=3)",
    ),
    ("cfg_chunked", "Chunked prefill is enabled with max_num_batched_tokens=2048."),
    ("cfg_blocks", "# cuda blocks: 2230, # CPU blocks: 4096"),
    ("cfg_blocks", "# GPU blocks: 512"),
    ("cfg_kv_size", "GPU KV cache size: 1,048,576 tokens"),
    ("cfg_kv_size", "Maximum concurrency for 32,768 tokens per request: 32.00x"),
    ("cfg_concurrency", "Maximum concurrency for 4096 tokens per request: 2.5x"),
    ("cfg_version", "vLLM API server version 0.8.5.post1"),
    ("cfg_max_len", "Using max model len 8192"),
    ("cfg_num_gpu_blocks", "num_gpu_blocks is: 4000"),
    ("cfg_max_num_seqs", "Reducing max_num_seqs to 128"),
    ("cfg_kv_memory", "Available KV cache memory: 20.5 GiB"),
    ("cfg_override", "Overriding num_gpu_blocks=8192 with num_gpu_blocks_override=64"),
    ("cfg_weights", "Loading model weights took 7.1201 GB"),
    (
        "cfg_total_mem",
        "Memory profiling takes 5 seconds; total_gpu_memory (79.3GiB) x "
        "gpu_memory_utilization (0.90) = 71.4GiB; model weights take 14.2GiB; the rest of the memory "
        "reserved for KV Cache is 50.1GiB.",
    ),
    ("cfg_engine", "nothing a regex reads"),
    ("cfg_unknown_kind", "max_num_batched_tokens=99"),
]
SCHEMA = {
    "kind": pl.String,
    "text": pl.String,
    "time": pl.Datetime("us", "UTC"),
    "source": pl.String,
    "n": pl.UInt32,
    "run": pl.Int32,
}


def oracle(cfg: pl.DataFrame) -> pl.DataFrame:
    parts = [
        cfg.filter(pl.col("kind") == k).select(
            pl.lit(key).alias("key"),
            pl.col("text").str.extract(rx, 1).alias("value"),
            pl.lit("seen").alias("status"),
            "time",
            "source",
            pl.col("n").alias("line"),
            pl.lit(None, pl.String).alias("note"),
            "run",
        )
        for k, key, rx in EXTRACTORS
    ]
    return pl.concat(parts).filter(pl.col("value").is_not_null())


def frame(rows: list[tuple[int, int | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "kind": LINES[i][0],
                "text": LINES[i][1],
                "time": T0 + dt.timedelta(seconds=n),
                "source": "a.log",
                "n": n + 1,
                "run": run,
            }
            for n, (i, run) in enumerate(rows)
        ],
        schema=SCHEMA,
    )


def test_every_kind_of_line_gives_the_loops_rows() -> None:
    cfg = frame([(i, None) for i in range(len(LINES))])
    got = _extracted(cfg)
    assert got.equals(oracle(cfg))
    # one of each: the extractors that read these lines all found their value
    assert got.height >= 30
    assert ("num_gpu_blocks", "2230") in got.select("key", "value").rows()
    assert ("max_model_len", "32,768") in got.select("key", "value").rows()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(LINES) - 1), st.one_of(st.none(), st.integers(0, 2))), max_size=30))
def test_mixtures_give_the_loops_rows_in_its_order(rows: list[tuple[int, int | None]]) -> None:
    cfg = frame(rows)
    got = _extracted(cfg)
    want = oracle(cfg)
    assert got.schema == want.schema
    assert got.equals(want)
