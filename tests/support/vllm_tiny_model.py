"""Writes a tiny servable model folder for ``vllm serve --load-format dummy`` (run in the vLLM venv).

Not a test module: tests/capture/test_capture_serve.py runs ``python tests/support/vllm_tiny_model.py DIR`` with the
vLLM venv's python. No weights are downloaded (none can be, offline): a 2-layer Llama
``config.json`` (random weights from ``--load-format dummy``), a WordLevel tokenizer built here with
the ``tokenizers`` package (``t0`` ... ``t1023``, whitespace-split, no special tokens added), its
``tokenizer_config.json`` (``PreTrainedTokenizerFast``) and a ``generation_config.json``. A prompt of
N words ``tK`` is exactly N tokens, so the test chooses its prompt lengths.
"""

from __future__ import annotations

import json
import os
import sys

VOCAB = 1024


def write(d: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    os.makedirs(d, exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_hidden_layers": 2,
        "vocab_size": VOCAB,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(os.path.join(d, "tokenizer.json"))
    files = {
        "config.json": cfg,
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "unk_token": "<unk>",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "model_max_length": 4096,
        },
        "generation_config.json": {"bos_token_id": 1, "eos_token_id": 2},
    }
    for name, obj in files.items():
        with open(os.path.join(d, name), "w") as fh:
            json.dump(obj, fh)


if __name__ == "__main__":
    write(sys.argv[1])
    print(sys.argv[1])
