#!/usr/bin/env python3
"""Mixture-of-experts throughput on the CPU (a benchmark, not a test): a random-weight model of
Qwen3-30B-A3B's design scaled to this machine (synth_model.py --shape qwen3-moe-16l: 16
layers, 64 experts of 384, top 8, hidden 1024, bf16), or of DeepSeek-V2-Lite's
(--shape deepseek-v2-lite-8l: its multi-head latent attention unchanged, 8 layers, 16
experts of 1408, top 6, 2 shared), decode tok/s at batch 1 and prefill tok/s at 1 and 2
threads through `llmhost bench`, beside the decode bound that the bytes a token really reads
allow:

    bound tok/s = read bandwidth / (weight bytes - the embedding table (a token reads one row)
                                    - the routed experts not chosen (1 - top_k / n_experts)
                                    + the KV cache a step reads at that context)

For a model with multi-head latent attention it also decodes at a long context (--long) and
prints the latent KV bytes per token next to what a per-head K/V cache of the same heads
(num_heads x (qk_nope + qk_rope + v_head_dim) values) would hold, in the run's KV dtype.

with the read bandwidth of 1 GiB of anonymous memory measured in the same run
(read_bandwidth.py), and the bytes from `llmhost explain --json` (weight_bytes,
routed_expert_bytes, routed_share, groups.embedding). Each figure is the median of --runs
runs (the machine is shared: compare ratios, not absolute figures).

    python3 tools/bench/moe_bench.py [--llmhost build/host/llmhost] [--model DIR] [--runs 3]

Needs numpy (for the bandwidth reader). The model is written to ~/.cache/llmhost/bench when
absent (3.1 GB)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from read_bandwidth import Bandwidth

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def bench(llmhost: str, model: Path, threads: int, context: int, steps: int) -> dict:
    out = subprocess.run([llmhost, "bench", str(model), "--device", "cpu", "--threads",
                          str(threads), "--context", str(context), "--batch", "1", "-n",
                          str(steps), "--json", "--set", "kv_cache.dtype=bfloat16"], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)["cells"][0]


def expanded_kv_bytes(cfg: dict, elem: int) -> int:
    """What a per-head K/V cache of an MLA model's heads would hold per token."""
    heads = cfg["num_attention_heads"]
    width = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"] + cfg["v_head_dim"]
    return cfg["num_hidden_layers"] * heads * width * elem


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llmhost", default=str(ROOT / "build" / "host" / "llmhost"))
    ap.add_argument("--shape", default="qwen3-moe-16l",
                    choices=("qwen3-moe-16l", "deepseek-v2-lite-8l"))
    ap.add_argument("--model", type=Path, help="default: ~/.cache/llmhost/bench/SHAPE")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--long", type=int, default=2048, help="long context (MLA models)")
    a = ap.parse_args()
    if a.model is None:
        a.model = Path.home() / ".cache" / "llmhost" / "bench" / a.shape
    if not (a.model / "model.safetensors").exists():
        subprocess.run([sys.executable, str(HERE / "synth_model.py"), str(a.model), "--shape",
                        a.shape], check=True)
    plan = json.loads(subprocess.run([a.llmhost, "explain", "--json", str(a.model), "--set",
                                      "kv_cache.dtype=bfloat16"], check=True,
                                     capture_output=True, text=True).stdout)
    cfg = json.loads((a.model / "config.json").read_text())
    kv_tok = plan["kv_bytes_per_token"]
    emb = plan["groups"]["embedding"]["bytes"]
    routed, share = plan["routed_expert_bytes"], plan["routed_share"]
    read = plan["weight_bytes"] - emb - routed * (1.0 - share)
    print(f"model: {a.model} ({plan['parameters'] / 1e9:.2f} G parameters, "
          f"{plan['active_parameters'] / 1e9:.2f} G active; {plan['weight_bytes'] / 1e9:.2f} GB, "
          f"{read / 1e6:.0f} MB read per decoded token)")
    mla = "kv_lora_rank" in cfg
    if mla:
        full = expanded_kv_bytes(cfg, 2)
        print(f"KV per token (bf16, {cfg['num_hidden_layers']} layers): latent {kv_tok} B "
              f"({cfg['kv_lora_rank']} + {cfg['qk_rope_head_dim']} per layer); a per-head K/V "
              f"cache of the same {cfg['num_attention_heads']} heads: {full} B "
              f"({full / kv_tok:.1f}x)")
    contexts = (16, a.long) if mla else (16,)
    bw = Bandwidth()
    rows = []
    for threads in (1, 2):
        gbs = bw.anon(threads)
        for ctx in contexts:
            dec = [bench(a.llmhost, a.model, threads, ctx, 65)["decode_tok_s"]
                   for _ in range(a.runs)]
            bound = gbs * 1e9 / (read + kv_tok * (ctx + 32))
            rows.append((threads, ctx, statistics.median(dec), bound, gbs))
        pre = [bench(a.llmhost, a.model, threads, 512, 2)["prefill_tok_s"] for _ in range(a.runs)]
        rows.append((threads, "pp512", statistics.median(pre), None, gbs))
    print("| threads | context | decode tok/s (tg64) | bound tok/s | share of bound | "
          "prefill tok/s (pp512) |")
    print("|---|---|---|---|---|---|")
    for t, ctx, v, b, gbs in rows:
        if b is None:
            print(f"| {t} | | | | | {v:.1f} |")
        else:
            print(f"| {t} | {ctx} | {v:.2f} | {b:.2f} ({gbs:.1f} GB/s) | {v / b:.0%} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
