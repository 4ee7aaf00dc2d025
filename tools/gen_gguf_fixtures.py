#!/usr/bin/env python3
"""Write the GGUF model fixtures of tests/fixtures/gguf from the committed safetensors
fixtures of tests/fixtures/models, the way llama.cpp's convert_hf_to_gguf.py writes such files,
and a few deliberately malformed ones.

    python3 tools/gen_gguf_fixtures.py [--out tests/fixtures/gguf]

Needs gguf (gguf-py, llama.cpp's own writer) and numpy, in a virtual environment outside the
repository: python3 -m venv /tmp/ggufenv && /tmp/ggufenv/bin/pip install gguf numpy.

What the converter does and this script repeats (so the test checks our reading against an
independent writer):
  - metadata: general.architecture, general.name, general.file_type and the architecture's
    keys ({arch}.context_length, embedding_length, block_count, feed_forward_length,
    attention.head_count, attention.head_count_kv, attention.layer_norm_rms_epsilon,
    rope.freq_base, attention.key_length / value_length, vocab_size);
  - tensor names: token_embd, blk.N.attn_norm / attn_q / attn_k / attn_v / attn_output /
    ffn_norm / ffn_gate / ffn_up / ffn_down (+ attn_q_norm / attn_k_norm, biases), output_norm,
    output (absent when the head is tied);
  - "llama" files: q_proj and k_proj rows (and biases) permuted per head for llama.cpp's
    interleaved RoPE (LlamaModel.permute); qwen2 / qwen3 are stored unpermuted;
  - types: 1-D tensors stay F32; 2-D ones in the file's type (F32, BF16 or Q8_0 here, as
    gguf.quants.quantize writes them).

Each fixture says in its general.name which safetensors fixture it came from; the test reads
that fixture's reference.json (prompts, transformers' logits). Exit status: 0 ok, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import safetensors_io

try:
    import gguf
except ImportError:  # pragma: no cover - a usage error, reported as one line
    sys.exit("gen_gguf_fixtures.py needs gguf-py: pip install gguf numpy (in a venv)")

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "models"
Q = gguf.GGMLQuantizationType

# (output name, source fixture, gguf architecture, 2-D tensor type, edits): the edits are what
# the source's config.json must say to describe the model the GGUF file holds, where llama.cpp's
# format cannot carry the source's setting (the test runs the source with them): its Gemma
# files always tie the head (the converter drops lm_head.weight), store no
# query_pre_attn_scalar (llama.cpp takes head_dim) and no layer_types (Gemma 3: every sixth
# layer global).
FIXTURES = [
    ("llama-mha-f32", "llama-mha-f32", "llama", Q.F32, {}),
    ("llama-gqa-bf16", "llama-gqa-bf16", "llama", Q.BF16, {}),
    ("llama-attn-bias-q8_0", "llama-attn-bias-f32", "llama", Q.Q8_0, {}),
    ("qwen2-tied-bf16", "qwen2-tied-bf16", "qwen2", Q.BF16, {}),
    ("qwen3-q8_0", "qwen3-f32", "qwen3", Q.Q8_0, {}),
    ("gemma2-f32", "gemma2-f32", "gemma2", Q.F32,
     {"query_pre_attn_scalar": 16, "tie_word_embeddings": True}),
    ("gemma3-f32", "gemma3-f32", "gemma3", Q.F32,
     {"tie_word_embeddings": True, "layer_types": None}),
    # Mixtral: a "llama" file with llama.expert_count, each layer's experts stacked into
    # blk.N.ffn_{gate,up,down}_exps [experts, rows, cols] and the router as ffn_gate_inp
    ("mixtral-f32", "mixtral-f32", "llama", Q.F32, {}),
    ("mixtral-q8_0", "mixtral-f32", "llama", Q.Q8_0, {}),
    # llama.cpp's qwen2moe / qwen3moe files: every layer sparse, experts stacked under
    # ffn_*_exps, qwen2moe's shared expert as ffn_*_shexp with its gate ffn_gate_inp_shexp
    ("qwen2moe-f32", "qwen2moe-sparse-f32", "qwen2moe", Q.F32, {}),
    ("qwen3moe-q8_0", "qwen3moe-sparse-f32", "qwen3moe", Q.Q8_0, {}),
]
EXPERT_NAMES = {"w1": "ffn_gate_exps", "w3": "ffn_up_exps", "w2": "ffn_down_exps",
                "gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps",
                "down_proj": "ffn_down_exps"}

GEMMA_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
}
TOP_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


class FixtureError(Exception):
    pass


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    try:
        return safetensors_io.read(path)
    except ValueError as e:
        raise FixtureError(str(e)) from e


def gguf_name(name: str, gemma: bool) -> str:
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    table = GEMMA_LAYER_NAMES if gemma else LAYER_NAMES
    parts = name.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in table:
        return f"blk.{int(parts[2])}.{table[parts[3]]}"
    raise FixtureError(f"tensor {name} has no llama.cpp name here")


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute: rotate-half rows -> interleaved rows."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]) \
            .swapaxes(1, 2).reshape(w.shape)


def rope_of(cfg: dict) -> dict:
    """The full-attention layers' RoPE ({rope_theta, rope_type, factor}), transformers 5 or 4."""
    rp = cfg.get("rope_parameters") or {}
    rp = rp.get("full_attention", rp)
    return {"rope_theta": rp.get("rope_theta", cfg.get("rope_theta", 10000.0)),
            "rope_type": rp.get("rope_type", "default"), "factor": rp.get("factor")}


def write_fixture(out: Path, name: str, src: str, arch: str, qtype) -> None:
    d = MODELS / src
    cfg = json.loads((d / "config.json").read_text())
    tensors = read_safetensors(d / "model.safetensors")
    gemma = arch.startswith("gemma")
    n_head = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_head
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    w = gguf.GGUFWriter(str(out / f"{name}.gguf"), arch)
    w.add_name(f"llmhost fixture {name} (from tests/fixtures/models/{src})")
    w.add_file_type({Q.F32: 0, Q.BF16: 32, Q.Q8_0: 7}[qtype])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    rope = rope_of(cfg)
    if arch != "gemma2":  # llama.cpp's Gemma 2 has base 10000 and writes none
        w.add_rope_freq_base(rope["rope_theta"])
    if rope["rope_type"] == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    if "head_dim" in cfg:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_vocab_size(cfg["vocab_size"])
    if name == "llama-mha-f32":
        # llama.cpp's stop ids: generation ends at eos and at the end of a turn (eot)
        w.add_eos_token_id(3)
        w.add_eot_token_id(7)
    n_experts = cfg.get("num_local_experts") or cfg.get("num_experts")
    if n_experts:
        w.add_expert_count(n_experts)
        w.add_expert_used_count(cfg["num_experts_per_tok"])
    if cfg.get("moe_intermediate_size"):
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if cfg.get("shared_expert_intermediate_size"):
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    if gemma:
        if cfg.get("attn_logit_softcapping"):
            w.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        if cfg.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
        w.add_sliding_window(cfg["sliding_window"])
    tied = cfg.get("tie_word_embeddings", False) or gemma

    def put(gname, a):
        if a.ndim == 1 or qtype == Q.F32:
            w.add_tensor(gname, np.ascontiguousarray(a, dtype=np.float32))
        else:
            w.add_tensor(gname, gguf.quants.quantize(np.ascontiguousarray(a), qtype),
                         raw_dtype=qtype)

    experts = {}  # (layer, w1/w2/w3) -> {expert: array}
    for tname in sorted(tensors):
        if tied and tname == "lm_head.weight":
            continue  # the converter writes the tied head once, as token_embd
        parts = tname.split(".")
        if len(parts) == 8 and parts[3:5] in (["block_sparse_moe", "experts"],
                                              ["mlp", "experts"]):
            experts.setdefault((int(parts[2]), parts[6]), {})[int(parts[5])] = tensors[tname]
            continue
        a = tensors[tname]
        if arch == "llama" and ".q_proj." in tname:
            a = permute(a, n_head)
        elif arch == "llama" and ".k_proj." in tname:
            a = permute(a, n_kv)
        if gemma and tname.endswith("norm.weight"):
            a = a + np.float32(1.0)  # Gemma's norms are stored as 1 + w (llama.cpp: x * w)
        if tname.endswith("shared_expert_gate.weight"):
            a = a.reshape(-1)  # the converter squeezes [1, H] to llama.cpp's {n_embd}
        put(gguf_name(tname, gemma), a)
    for (layer, wn), by_expert in sorted(experts.items()):
        stacked = np.stack([by_expert[e] for e in range(len(by_expert))])
        put(f"blk.{layer}.{EXPERT_NAMES[wn]}.weight", stacked)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_bad(out: Path) -> None:
    """Malformed model sources, each for one error class of tests/runtime/test_gguf_models.c."""
    def small(name, arch, keys=True):
        w = gguf.GGUFWriter(str(out / f"{name}.gguf"), arch)
        if keys:
            w.add_context_length(64)
            w.add_embedding_length(32)
            w.add_block_count(1)
            w.add_feed_forward_length(64)
            w.add_head_count(2)
            w.add_layer_norm_rms_eps(1e-6)
            w.add_vocab_size(16)
        return w

    def finish(w):
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    # general.architecture that no plugin serves
    finish(small("bad-unknown-arch", "mamba"))
    # a required key missing (llama.embedding_length)
    w = gguf.GGUFWriter(str(out / "bad-missing-key.gguf"), "llama")
    w.add_block_count(1)
    w.add_head_count(2)
    w.add_feed_forward_length(64)
    w.add_layer_norm_rms_eps(1e-6)
    finish(w)
    # a tensor the llama table does not name
    w = small("bad-unmapped-tensor", "llama")
    w.add_tensor("blk.0.attn_qkv.weight", np.zeros((96, 32), np.float32))
    finish(w)
    # one shard of a split file
    w = small("bad-split", "llama")
    w.add_uint16("split.no", 0)
    w.add_uint16("split.count", 3)
    finish(w)
    # llama3 RoPE factors (Llama 3.1's rope_freqs.weight), which the family does not implement
    w = small("bad-rope-freqs", "llama")
    w.add_tensor("rope_freqs.weight", np.ones(8, np.float32))
    finish(w)
    # stacked experts that are not 3-D
    w = small("bad-experts-2d", "llama")
    w.add_expert_count(2)
    w.add_expert_used_count(1)
    w.add_tensor("blk.0.ffn_gate_exps.weight", np.zeros((64, 32), np.float32))
    finish(w)
    # experts in a file of another architecture (qwen3moe-style keys on a qwen3 file)
    w = small("bad-experts-arch", "qwen3")
    w.add_expert_count(4)
    finish(w)
    # a ggml type this build does not read (Q2_K: 256 elements in 84 bytes)
    w = small("bad-ggml-type", "llama")
    w.add_tensor("token_embd.weight", np.zeros((16, 84), np.uint8), raw_dtype=Q.Q2_K)
    finish(w)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "gguf")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        for name, src, arch, qtype, _ in FIXTURES:
            write_fixture(args.out, name, src, arch, qtype)
        write_bad(args.out)
    except FixtureError as e:
        print(f"gen_gguf_fixtures.py: {e}", file=sys.stderr)
        return 2
    (args.out / "manifest.txt").write_text(
        "".join(f"{name}\t{src}\t{qtype.name}\t{json.dumps(edits)}\n"
                for name, src, _, qtype, edits in FIXTURES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
