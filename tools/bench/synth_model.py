#!/usr/bin/env python3
"""Writes a random-weight Llama checkpoint of a real model's shape for throughput benchmarks
(`llmhost bench`), with the Python standard library only, so it runs on a machine without
network access or numpy (the GPU machine).

    synth_model.py OUT_DIR [--shape llama-3.2-1b|llama-3.1-8b|smollm2-135m|qwen3-moe-16l|
                                    deepseek-v2-lite-8l] [--seed N]

qwen3-moe-16l is Qwen3-30B-A3B's design scaled to fit a small machine (Qwen3MoeForCausalLM:
16 layers, 64 experts of 384, top 8, hidden 1024, its vocabulary): 1.56 G parameters, 0.51 G
active per token (explain's active_parameters; 0.35 G without the embedding table, of which a
token reads one row).

deepseek-v2-lite-8l is DeepSeek-V2-Lite's design scaled the same way (DeepseekV2ForCausalLM:
its multi-head latent attention unchanged -- 16 heads, kv_lora_rank 512, 64 rope + 128 nope
dims, v_head_dim 128, no query compression --, 8 layers of which the first dense, 16 experts of
1408, top 6, 2 shared, its vocabulary).

Only the shapes matter for speed: the values are bf16 draws of a normal distribution with
std 0.02 (norm weights 1.0), written as a pseudo-random pattern of 1 MiB that each tensor
reads from its own offset, so writing gigabytes takes seconds. Never use such a model for
correctness checks."""
import argparse
import json
import os
import random
import struct
import sys

SHAPES = {
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                         vocab_size=49152, max_position_embeddings=8192, rope_theta=100000.0,
                         tie_word_embeddings=True),
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                         vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
                         tie_word_embeddings=True),
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                         vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
                         tie_word_embeddings=False),
    "qwen3-moe-16l": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=16,
                          num_attention_heads=16, num_key_value_heads=4, head_dim=64,
                          vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
                          tie_word_embeddings=False, moe=dict(num_experts=64,
                                                              num_experts_per_tok=8,
                                                              moe_intermediate_size=384,
                                                              norm_topk_prob=True)),
    "deepseek-v2-lite-8l": dict(hidden_size=2048, intermediate_size=10944, num_hidden_layers=8,
                                num_attention_heads=16, num_key_value_heads=16, head_dim=64,
                                vocab_size=102400, max_position_embeddings=163840,
                                rope_theta=10000.0, tie_word_embeddings=False,
                                mla=dict(kv_lora_rank=512, qk_rope_head_dim=64,
                                         qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=None),
                                moe=dict(n_routed_experts=16, num_experts_per_tok=6,
                                         moe_intermediate_size=1408, n_shared_experts=2,
                                         first_k_dense_replace=1, topk_method="greedy",
                                         norm_topk_prob=False, routed_scaling_factor=1.0)),
}

PATTERN_BYTES = 1 << 20


def bf16_bits(x):
    """Round-to-nearest-even f32 -> bf16 bits."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def tensors(c):
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q = c["num_attention_heads"] * c["head_dim"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    yield "model.embed_tokens.weight", (v, h), False
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        yield p + "input_layernorm.weight", (h,), True
        yield p + "post_attention_layernorm.weight", (h,), True
        mla = c.get("mla")
        if mla:
            yield from deepseek_layer(c, mla, c["moe"], l, p)
            continue
        yield p + "self_attn.q_proj.weight", (q, h), False
        yield p + "self_attn.k_proj.weight", (kv, h), False
        yield p + "self_attn.v_proj.weight", (kv, h), False
        yield p + "self_attn.o_proj.weight", (h, q), False
        moe = c.get("moe")
        if moe:
            yield p + "self_attn.q_norm.weight", (c["head_dim"],), True
            yield p + "self_attn.k_norm.weight", (c["head_dim"],), True
            yield p + "mlp.gate.weight", (moe["num_experts"], h), False
            mi = moe["moe_intermediate_size"]
            for e in range(moe["num_experts"]):
                yield p + f"mlp.experts.{e}.gate_proj.weight", (mi, h), False
                yield p + f"mlp.experts.{e}.up_proj.weight", (mi, h), False
                yield p + f"mlp.experts.{e}.down_proj.weight", (h, mi), False
            continue
        yield p + "mlp.gate_proj.weight", (i, h), False
        yield p + "mlp.up_proj.weight", (i, h), False
        yield p + "mlp.down_proj.weight", (h, i), False
    yield "model.norm.weight", (h,), True
    if not c["tie_word_embeddings"]:
        yield "lm_head.weight", (v, h), False


def deepseek_layer(c, mla, moe, l, p):
    h, heads = c["hidden_size"], c["num_attention_heads"]
    lora, rope, nope, vd = (mla["kv_lora_rank"], mla["qk_rope_head_dim"],
                            mla["qk_nope_head_dim"], mla["v_head_dim"])
    yield p + "self_attn.q_proj.weight", (heads * (nope + rope), h), False
    yield p + "self_attn.kv_a_proj_with_mqa.weight", (lora + rope, h), False
    yield p + "self_attn.kv_a_layernorm.weight", (lora,), True
    yield p + "self_attn.kv_b_proj.weight", (heads * (nope + vd), lora), False
    yield p + "self_attn.o_proj.weight", (h, heads * vd), False
    if l < moe["first_k_dense_replace"]:
        i = c["intermediate_size"]
        yield p + "mlp.gate_proj.weight", (i, h), False
        yield p + "mlp.up_proj.weight", (i, h), False
        yield p + "mlp.down_proj.weight", (h, i), False
        return
    mi = moe["moe_intermediate_size"]
    yield p + "mlp.gate.weight", (moe["n_routed_experts"], h), False
    for e in range(moe["n_routed_experts"]):
        yield p + f"mlp.experts.{e}.gate_proj.weight", (mi, h), False
        yield p + f"mlp.experts.{e}.up_proj.weight", (mi, h), False
        yield p + f"mlp.experts.{e}.down_proj.weight", (h, mi), False
    si = mi * moe["n_shared_experts"]
    yield p + "mlp.shared_experts.gate_proj.weight", (si, h), False
    yield p + "mlp.shared_experts.up_proj.weight", (si, h), False
    yield p + "mlp.shared_experts.down_proj.weight", (h, si), False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.2-1b")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    c = dict(SHAPES[a.shape])
    rng = random.Random(a.seed)
    pattern = bytearray()
    for _ in range(PATTERN_BYTES // 2):
        pattern += struct.pack("<H", bf16_bits(rng.gauss(0.0, 0.02)))
    one = struct.pack("<H", bf16_bits(1.0))

    header, offset, plan = {}, 0, []
    for name, shape, is_norm in tensors(c):
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + 2 * n]}
        plan.append((2 * n, is_norm))
        offset += 2 * n
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "model.safetensors")
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        start = 0
        for nbytes, is_norm in plan:
            if is_norm:
                f.write(one * (nbytes // 2))
                continue
            left = nbytes
            while left:
                s = start % PATTERN_BYTES
                k = min(left, PATTERN_BYTES - s)
                f.write(pattern[s:s + k])
                left -= k
                start += k
            start += 4096  # the next tensor reads the pattern from elsewhere
    os.replace(path + ".tmp", path)

    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "attention_bias": False, "mlp_bias": False, "rms_norm_eps": 1e-5, "dtype": "bfloat16",
        "bos_token_id": 1, "eos_token_id": 2,
        **{k: c[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                             "num_attention_heads", "num_key_value_heads", "head_dim",
                             "vocab_size", "max_position_embeddings", "tie_word_embeddings")},
        "rope_theta": c["rope_theta"],
    }
    if c.get("mla"):
        config.update(architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2",
                      **c["mla"], **c["moe"])
    elif c.get("moe"):
        config.update(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                      decoder_sparse_step=1, mlp_only_layers=[], **c["moe"])
    with open(os.path.join(a.out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    print(f"{a.out}: {a.shape}, {offset / 1e9:.2f} GB of bf16 weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
