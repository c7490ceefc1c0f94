"""A tiny llama-architecture MoE model with random weights, written with the ``gguf`` package.

``ensure_model()`` writes it once under ``~/.cache/spyglass/llama.cpp/models/`` (outside the clone): n_embd 64, 2 blocks,
4 heads and 4 KV heads, n_ff 128, context 4096, 4 experts with 2 used per token (so llama.cpp loads it
as an MoE), f32 weights drawn from a fixed seed, and the 32,000-token SentencePiece vocabulary copied
from the sdist's ``models/ggml-vocab-llama-spm.gguf``. About 18 MB; it loads in a fraction of a second and
serves real completions (gibberish text, real timings, real cache behaviour). The file is written
to a temporary name and renamed, so a reader never sees half a model.

Run ``python -m spyglass.engine.llama.model`` to write (or find) it and print its path.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from spyglass.engine.llama.build import CACHE_ROOT, BuildError, ensure_built

N_EMBD = 64
N_BLOCKS = 2
N_HEAD = 4
N_FF = 128
N_CTX_TRAIN = 4096
N_EXPERT = 4
N_EXPERT_USED = 2
SEED = 19
MODEL_NAME = "tiny-moe-f32.gguf"
SPLIT_MODEL_NAME = "tiny-moe-f32-split-experts.gguf"
"""The same model with one tensor per expert (`blk.N.ffn_gate.E`): llama.cpp before April 2024 reads no other."""


def _vocab(vocab_path: Path) -> dict[str, Any]:
    import gguf

    reader = gguf.GGUFReader(vocab_path)

    def field(name: str) -> Any:
        found = reader.get_field(name)
        if found is None:
            raise BuildError(f"{vocab_path} has no {name}")
        return found.contents()

    return {
        "tokens": field("tokenizer.ggml.tokens"),
        "scores": field("tokenizer.ggml.scores"),
        "types": field("tokenizer.ggml.token_type"),
        "bos": int(field("tokenizer.ggml.bos_token_id")),
        "eos": int(field("tokenizer.ggml.eos_token_id")),
    }


def _tensors(n_vocab: int, split_experts: bool = False) -> dict[str, np.ndarray[Any, Any]]:
    """Every tensor llama.cpp's llama architecture with experts asks for, numpy shapes (GGUF's reversed);
    with `split_experts`, each expert's FFN as tensors of its own, as 2024's llama.cpp wants them."""
    rng = np.random.default_rng(SEED)

    def weight(*shape: int) -> np.ndarray[Any, Any]:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(n: int) -> np.ndarray[Any, Any]:
        return np.ones(n, dtype=np.float32)

    tensors = {
        "token_embd.weight": weight(n_vocab, N_EMBD),
        "output_norm.weight": ones(N_EMBD),
        "output.weight": weight(n_vocab, N_EMBD),
    }
    for block in range(N_BLOCKS):
        prefix = f"blk.{block}."
        tensors |= {
            prefix + "attn_norm.weight": ones(N_EMBD),
            prefix + "attn_q.weight": weight(N_EMBD, N_EMBD),
            prefix + "attn_k.weight": weight(N_EMBD, N_EMBD),
            prefix + "attn_v.weight": weight(N_EMBD, N_EMBD),
            prefix + "attn_output.weight": weight(N_EMBD, N_EMBD),
            prefix + "ffn_norm.weight": ones(N_EMBD),
            prefix + "ffn_gate_inp.weight": weight(N_EXPERT, N_EMBD),
            prefix + "ffn_gate_exps.weight": weight(N_EXPERT, N_FF, N_EMBD),
            prefix + "ffn_up_exps.weight": weight(N_EXPERT, N_FF, N_EMBD),
            prefix + "ffn_down_exps.weight": weight(N_EXPERT, N_EMBD, N_FF),
        }
        if split_experts:
            for part in ("gate", "up", "down"):
                merged = tensors.pop(prefix + f"ffn_{part}_exps.weight")
                tensors |= {prefix + f"ffn_{part}.{e}.weight": np.ascontiguousarray(merged[e]) for e in range(N_EXPERT)}
    return tensors


def write_model(path: Path, vocab_path: Path, split_experts: bool = False) -> Path:
    """Write the tiny MoE model to ``path`` (through a temporary name) and return ``path``."""
    import gguf

    vocab = _vocab(vocab_path)
    tmp = path.with_name(path.name + ".tmp")
    writer = gguf.GGUFWriter(tmp, "llama")
    writer.add_name("spyglass tiny MoE (random weights)")
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_BLOCKS)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_expert_count(N_EXPERT)
    writer.add_expert_used_count(N_EXPERT_USED)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(vocab["tokens"])
    writer.add_token_scores(vocab["scores"])
    writer.add_token_types(vocab["types"])
    writer.add_bos_token_id(vocab["bos"])
    writer.add_eos_token_id(vocab["eos"])
    for name, tensor in _tensors(len(vocab["tokens"]), split_experts).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


def ensure_model(cache_root: Path = CACHE_ROOT, split_experts: bool = False) -> Path:
    """The tiny model's path, written first if absent (the pinned build supplies the vocabulary)."""
    path = cache_root / "models" / (SPLIT_MODEL_NAME if split_experts else MODEL_NAME)
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_model(path, ensure_built(cache_root=cache_root).vocab, split_experts)


def main() -> int:
    try:
        print(ensure_model())
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
