#!/usr/bin/env python3
"""Mixture-of-experts throughput on the CPU (a benchmark, not a test): a random-weight model of
Qwen3-30B-A3B's design scaled to this machine (synth_model.py --shape qwen3-moe-16l: 16
layers, 64 experts of 384, top 8, hidden 1024, bf16), decode tok/s at batch 1 and prefill
tok/s at 1 and 2 threads through `llmhost bench`, beside the decode bound that the bytes a
token really reads allow:

    bound tok/s = read bandwidth / (weight bytes - the embedding table (a token reads one row)
                                    - the routed experts not chosen (1 - top_k / n_experts))

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
                          str(steps), "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["cells"][0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llmhost", default=str(ROOT / "build" / "host" / "llmhost"))
    ap.add_argument("--model", type=Path,
                    default=Path.home() / ".cache" / "llmhost" / "bench" / "qwen3-moe-16l")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    if not (a.model / "model.safetensors").exists():
        subprocess.run([sys.executable, str(HERE / "synth_model.py"), str(a.model), "--shape",
                        "qwen3-moe-16l"], check=True)
    plan = json.loads(subprocess.run([a.llmhost, "explain", "--json", str(a.model)], check=True,
                                     capture_output=True, text=True).stdout)
    emb = plan["groups"]["embedding"]["bytes"]
    routed, share = plan["routed_expert_bytes"], plan["routed_share"]
    read = plan["weight_bytes"] - emb - routed * (1.0 - share)
    print(f"model: {a.model} ({plan['parameters'] / 1e9:.2f} G parameters, "
          f"{plan['active_parameters'] / 1e9:.2f} G active; {plan['weight_bytes'] / 1e9:.2f} GB, "
          f"{read / 1e6:.0f} MB read per decoded token)")
    bw = Bandwidth()
    rows = []
    for threads in (1, 2):
        gbs = bw.anon(threads)
        dec = [bench(a.llmhost, a.model, threads, 16, 65)["decode_tok_s"] for _ in range(a.runs)]
        pre = [bench(a.llmhost, a.model, threads, 512, 2)["prefill_tok_s"] for _ in range(a.runs)]
        bound = gbs * 1e9 / read
        rows.append((threads, statistics.median(dec), bound, gbs, statistics.median(pre)))
    print("| threads | decode tok/s (tg64) | bound tok/s | share of bound | prefill tok/s (pp512) |")
    print("|---|---|---|---|---|")
    for t, d, b, gbs, p in rows:
        print(f"| {t} | {d:.2f} | {b:.2f} ({gbs:.1f} GB/s) | {d / b:.0%} | {p:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
