#!/usr/bin/env python3
"""Prints the LongRoPE reference values embedded in tests/kernels/test_rope.c
(rope_longrope): transformers' Phi3RotaryEmbedding and
apply_rotary_pos_emb on a small Phi-3 config with partial rotary.

Dev-only (CI never runs it): needs transformers (5.x) and torch, e.g.
    /tmp/fixenv/bin/python tools/gen_longrope_ref.py

Config: hidden_size 64, 4 heads (head_dim 16), partial_rotary_factor 0.5 (rotary_dim 8, so 4
factors), rope_theta 10000, max_position_embeddings 32, top-level
original_max_position_embeddings 8 (as Phi-3 checkpoints keep it), rope_scaling
{"type": "longrope", short_factor, long_factor} without factor / attention_factor.
x [T, 2 heads, 16] from torch.manual_seed(0) randn (float32); each case rotates x's first T
rows at its positions; transformers picks the table from max(position_ids) + 1.
Also the attention scaling for factor / attention_factor variants.
"""
import torch
from transformers import Phi3Config
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding, apply_rotary_pos_emb

SHORT = [1.0, 1.125, 1.5, 2.75]
LONG = [1.5, 3.25, 9.0, 21.5]
H, D = 2, 16
CASES = [("short", [0, 1, 5, 7]), ("boundary", [2, 8]), ("long", [0, 9, 20, 31])]


def config(**rope_extra):
    rope = {"type": "longrope", "short_factor": SHORT, "long_factor": LONG}
    rope.update(rope_extra)
    return Phi3Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                      max_position_embeddings=32, original_max_position_embeddings=8,
                      partial_rotary_factor=0.5, rope_theta=10000.0, rope_scaling=rope)


def c_float(v):
    """A C float literal that reads back as the float32 v (9 significant digits)."""
    s = "%.9g" % v
    return (s if any(ch in s for ch in ".e") else s + ".0") + "f"


def c_floats(name, values, per_line=4):
    print(f"static const float {name}[{len(values)}] = {{")
    for i in range(0, len(values), per_line):
        print("    " + ", ".join(c_float(v) for v in values[i:i + per_line]) + ",")
    print("};")


def main():
    emb = Phi3RotaryEmbedding(config())
    torch.manual_seed(0)
    x = torch.randn(4, H, D, dtype=torch.float32)
    c_floats("LR_X", x.flatten().tolist())
    c_floats("LR_INV_SHORT", emb.original_inv_freq.tolist())
    outs = []
    for name, pos in CASES:
        p = torch.tensor([pos])
        cos, sin = emb(x, p)
        if name == "long":
            c_floats("LR_INV_LONG", emb.inv_freq.tolist())
        q = x[: len(pos)].transpose(0, 1).unsqueeze(0)  # [1, H, T, D]
        qe, _ = apply_rotary_pos_emb(q, q, cos, sin)
        outs.append((name, qe[0].transpose(0, 1).flatten().tolist()))
    print("static const float LR_ATT = %s;" % c_float(emb.attention_scaling))
    for name, vals in outs:
        c_floats("LR_Y_" + name.upper(), vals)
    for label, extra in [("factor 2", {"factor": 2.0}), ("attention_factor 0.75",
                                                        {"attention_factor": 0.75}),
                         ("factor 1", {"factor": 1.0})]:
        print("/* %s: attention_scaling %.17g */" % (label,
                                                      Phi3RotaryEmbedding(config(**extra))
                                                      .attention_scaling))


if __name__ == "__main__":
    main()
