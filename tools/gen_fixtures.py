#!/usr/bin/env python3
"""Generate tiny random-weight Hugging Face checkpoints + reference outputs.

The C runtime's tests load these checkpoints and compare their logits and
greedy generations against what transformers (PyTorch, CPU, eager attention)
produces for the same weights.  CI never runs this script: its output under
tests/fixtures/models/ is committed.

Usage (torch/transformers live in a virtualenv outside the repo; see
tools/requirements-fixtures.txt):

    python3 -m venv /tmp/fixenv
    /tmp/fixenv/bin/pip install -r tools/requirements-fixtures.txt
    /tmp/fixenv/bin/python tools/gen_fixtures.py --out tests/fixtures/models

Options: --only NAME[,NAME...] to regenerate a subset; --no-verify to skip the
reload check; --no-readme to leave README.md alone.

Everything is deterministic: each model has a fixed seed; if the first seed
gives degenerate greedy output (one token repeated, or a near-tie between the
top two logits at some greedy step, which would make token comparisons flaky),
the script moves on to seed+1, seed+2, ... in a fixed order, so a rerun with
the same versions writes the same bytes.

For each model <name> it writes tests/fixtures/models/<name>/:
  config.json, generation_config.json, model.safetensors
                     (or model-0000k-of-0000n.safetensors +
                     model.safetensors.index.json for the sharded model)
                     exactly as save_pretrained(safe_serialization=True) writes
                     them with the installed transformers.
  config.v4.json     the same config in the pre-transformers-5 spelling
                     (top-level rope_theta, rope_scaling instead of
                     rope_parameters, torch_dtype instead of dtype), which is
                     what most checkpoints on the Hub still carry; verified to
                     load into an identical model.
  reference.json     prompts, greedy generations, margins, num_parameters
                     (model.num_parameters()), versions, notes.
  logits_<i>.npy     float32 [len(prompt_i), vocab], forward pass on prompt i
                     alone, computed in the checkpoint's dtype.
  logits_f32_<i>.npy (bf16 checkpoints only) the same with the bf16 weights
                     upcast to float32 (model.float()).
  tokenizer.json, tokenizer_config.json
                     (models with a "tokenizer" entry only) the base tokenizer.json
                     with the entry's special tokens added at the next ids, and its
                     chat template / bos / eos; the entry's chat_prompts become extra
                     prompts (the chat template applied with the generation prompt).
and tests/fixtures/models/versions.json + README.md.
"""

import argparse
import copy
import json
import math
import os
import platform
import shutil
import sys
import tempfile

import numpy as np
import safetensors
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

N_NEW = 32            # generated tokens per prompt
F32_MIN_MARGIN = 2e-3  # min top1-top2 logit gap at every greedy step (f32 compute)
MIN_DISTINCT = 4      # min distinct tokens among the 32 generated, per prompt
MAX_SEED_TRIES = 64

# Base config shared by all models; per-model "config" entries override it.
BASE = dict(
    vocab_size=256,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    intermediate_size=128,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    tie_word_embeddings=False,
    # No token ids that generate() (or a runtime) would treat as stop/pad
    # tokens: the references are plain argmax decoding of 32 tokens.
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
    use_cache=True,
)

# name, model_type, dtype, seed, config overrides, prompt lengths, covers
MODELS = [
    dict(name="llama-mha-f32", model_type="llama", dtype="float32", seed=1001,
         config=dict(),
         covers="Llama baseline: MHA (4 q heads, 4 kv heads, head_dim 16), "
                "untied lm_head, default RoPE (theta 10000), float32."),
    dict(name="llama-gqa-bf16", model_type="llama", dtype="bfloat16", seed=1002,
         config=dict(num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                     intermediate_size=192),
         covers="GQA 8 q heads / 2 kv heads (group 4); explicit head_dim 16 != "
                "hidden/heads = 8 (q_proj is 64->128, o_proj 128->64); "
                "bfloat16 weights and compute; untied."),
    dict(name="llama-tied-f32", model_type="llama", dtype="float32", seed=1003,
         config=dict(tie_word_embeddings=True, vocab_size=320),
         covers="tie_word_embeddings=true: no lm_head.weight tensor in the "
                "file; the output projection is model.embed_tokens.weight."),
    dict(name="llama-rope-linear", model_type="llama", dtype="float32", seed=1004,
         config=dict(rope_parameters=dict(rope_type="linear", factor=2.0,
                                          rope_theta=10000.0)),
         covers="RoPE linear scaling (position interpolation), factor 2, "
                "theta 10000: positions are divided by 2."),
    dict(name="llama-rope-dynamic", model_type="llama", dtype="float32", seed=1005,
         config=dict(max_position_embeddings=16,
                     rope_parameters=dict(rope_type="dynamic", factor=2.0,
                                          rope_theta=10000.0)),
         prompt_lens=(5, 24, 1),
         covers="RoPE dynamic NTK scaling, factor 2, max_position_embeddings "
                "16. Prompt 1 (24 tokens) exceeds 16, so its logits use the "
                "rescaled base; all generations run past position 16. See "
                "tests/fixtures/models/README.md for HF's exact (stateful) "
                "semantics."),
    dict(name="llama-rope-llama3", model_type="llama", dtype="float32", seed=1006,
         config=dict(rope_parameters=dict(rope_type="llama3", factor=8.0,
                                          low_freq_factor=1.0, high_freq_factor=4.0,
                                          original_max_position_embeddings=64,
                                          rope_theta=500000.0)),
         covers="Llama-3.1 RoPE scaling (factor 8, low 1, high 4, original "
                "max pos 64, theta 500000). With head_dim 16 the 8 frequency "
                "pairs hit all three branches: pair 0 unscaled (wavelen 6.3 < "
                "16), pair 1 smoothed (wavelen 32.5), pairs 2-7 divided by 8."),
    dict(name="llama-rope-yarn", model_type="llama", dtype="float32", seed=1007,
         config=dict(rope_parameters=dict(rope_type="yarn", factor=4.0,
                                          original_max_position_embeddings=64,
                                          rope_theta=10000.0)),
         covers="YaRN RoPE scaling, factor 4, original max pos 64 "
                "(max_position_embeddings 256 = 4*64), default beta_fast 32 / "
                "beta_slow 1, truncate true; cos/sin multiplied by "
                "attention_factor 0.1*ln(4)+1."),
    dict(name="llama-attn-bias-f32", model_type="llama", dtype="float32", seed=1008,
         config=dict(attention_bias=True),
         covers="attention_bias=true: q_proj, k_proj, v_proj AND o_proj have "
                "bias vectors (Llama applies it to o_proj too)."),
    dict(name="mistral-swa-f32", model_type="mistral", dtype="float32", seed=1009,
         config=dict(sliding_window=8, num_key_value_heads=2),
         prompt_lens=(5, 20, 1),
         covers="Mistral with sliding_window 8 (query at position q attends "
                "keys k with q-8 < k <= q, i.e. itself and the 7 previous), "
                "GQA 4/2. Prompt 1 (20 tokens) and every generation are longer "
                "than the window."),
    dict(name="qwen2-f32", model_type="qwen2", dtype="float32", seed=1010,
         config=dict(vocab_size=512, num_key_value_heads=2, intermediate_size=192),
         covers="Qwen2: bias on q/k/v (not o), GQA 4/2, untied, vocab 512, "
                "use_sliding_window false."),
    dict(name="qwen2-tied-bf16", model_type="qwen2", dtype="bfloat16", seed=1011,
         config=dict(tie_word_embeddings=True, num_key_value_heads=2,
                     rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
         covers="Qwen2 with tied embeddings, rope_theta 1e6, bfloat16."),
    dict(name="qwen3-f32", model_type="qwen3", dtype="float32", seed=1012,
         config=dict(head_dim=32, num_key_value_heads=2, num_hidden_layers=3,
                     rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
         covers="Qwen3: per-head RMSNorm on q and k (q_norm/k_norm, weight "
                "[head_dim]) before RoPE, no qkv bias, head_dim 32 != hidden/"
                "heads = 16 (q_proj 64->128), GQA 4/2, 3 layers, float32."),
    dict(name="qwen3-bf16", model_type="qwen3", dtype="bfloat16", seed=1013,
         config=dict(head_dim=32, num_key_value_heads=2,
                     rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
         covers="Qwen3 as above (2 layers), bfloat16."),
    dict(name="llama-sharded-f32", model_type="llama", dtype="float32", seed=1014,
         config=dict(num_hidden_layers=3, num_key_value_heads=2, vocab_size=384),
         shard="300KB",
         covers="Sharded checkpoint: 3 model-0000k-of-00003.safetensors files "
                "+ model.safetensors.index.json (weight_map); Llama GQA 4/2, "
                "3 layers, vocab 384, float32."),
    # Served by the out-of-tree example plugin (examples/gemma_plugin), not by a built-in:
    # written to <out>/external/, where the suites that run every fixture on the built-in
    # plugins (tests/runtime, tests/weights) do not look.
    dict(name="gemma-f32", model_type="gemma", dtype="float32", seed=1015,
         emb_std=0.1, subdir="external",
         config=dict(num_key_value_heads=1, head_dim=256, tie_word_embeddings=True,
                     hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh"),
         covers="Gemma (GemmaForCausalLM): GELU-tanh gated MLP (gelu_pytorch_tanh), "
                "RMSNorm x/rms(x)*(1+w) (weights stored as offsets from 1), embeddings "
                "scaled by sqrt(hidden) = 8, tied lm_head, MQA 4 q heads / 1 kv head with "
                "head_dim 256 (q_proj 64->1024, o_proj 1024->64), float32. Served by the "
                "out-of-tree examples/gemma_plugin; in external/gemma-f32."),
]

# Families the host has never seen (issue 12): each is one built-in plugin's forward pass.
GPT2_BASE = dict(
    vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=128, n_inner=None,
    activation_function="gelu_new", layer_norm_epsilon=1e-5, tie_word_embeddings=True,
    bos_token_id=None, eos_token_id=None, pad_token_id=None, use_cache=True,
)
PHI3_LONGROPE = dict(
    rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.5,
    short_factor=[1.0, 1.25, 1.6, 2.5], long_factor=[1.5, 3.0, 6.0, 12.0],
)
MODELS += [
    dict(name="gpt2-f32", model_type="gpt2", dtype="float32", seed=1016, base=GPT2_BASE,
         config=dict(),
         covers="GPT-2 (GPT2LMHeadModel): LayerNorm with bias before attention and MLP, "
                "learned position embeddings (wpe), fused c_attn (q|k|v) and every linear "
                "a Conv1D stored [in, out], gelu_new MLP (n_inner null = 4 x n_embd), tied "
                "lm_head, its own config keys (n_embd 64, n_layer 2, n_head 4, n_positions "
                "128), no RoPE, float32."),
    dict(name="gpt2-bf16", model_type="gpt2", dtype="bfloat16", seed=1017, base=GPT2_BASE,
         config=dict(scale_attn_by_inverse_layer_idx=True),
         covers="GPT-2 as gpt2-f32 in bfloat16, with scale_attn_by_inverse_layer_idx "
                "(layer i's scores divided by i + 1 as well)."),
    dict(name="phi3-f32", model_type="phi3", dtype="float32", seed=1018,
         config=dict(num_key_value_heads=2, max_position_embeddings=64,
                     original_max_position_embeddings=16, sliding_window=12,
                     rope_parameters=PHI3_LONGROPE),
         prompt_lens=(5, 24, 1),
         covers="Phi-3 (Phi3ForCausalLM): fused qkv_proj and gate_up_proj, GQA 4/2, "
                "partial_rotary_factor 0.5 (RoPE on 8 of 16 head dims), longrope with "
                "short/long factors (original max 16, max 64: attention factor "
                "sqrt(1 + ln 4 / ln 16)); prompt 1 (24 tokens) and generations past 16 use "
                "long_factor. sliding_window 12 on every layer. float32."),
    dict(name="gemma2-f32", model_type="gemma2", dtype="float32", seed=1019, emb_std=0.1,
         config=dict(num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                     tie_word_embeddings=False, hidden_activation="gelu_pytorch_tanh",
                     query_pre_attn_scalar=24, sliding_window=6, attn_logit_softcapping=4.0,
                     final_logit_softcapping=5.0),
         prompt_lens=(5, 20, 1),
         covers="Gemma 2 (Gemma2ForCausalLM): (1 + w) RMSNorms before and after attention "
                "and MLP, embeddings scaled by sqrt(64), query_pre_attn_scalar 24 (scale "
                "24^-1/2, not head_dim's), attention logits soft-capped at 4 and final "
                "logits at 5 (both small enough to matter here), layers 0 and 2 sliding "
                "(window 6) and layer 1 full, GQA 4/2, GELU-tanh, untied (random tied "
                "Gemma embeddings make greedy repeat one token), float32."),
    dict(name="gemma3-f32", model_type="gemma3_text", dtype="float32", seed=1020,
         emb_std=0.1,
         config=dict(num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                     tie_word_embeddings=False, hidden_activation="gelu_pytorch_tanh",
                     query_pre_attn_scalar=16, sliding_window=6,
                     layer_types=["sliding_attention", "full_attention",
                                  "sliding_attention"],
                     rope_parameters=dict(
                         sliding_attention=dict(rope_type="default", rope_theta=10000.0),
                         full_attention=dict(rope_type="linear", factor=2.0,
                                             rope_theta=1000000.0))),
         prompt_lens=(5, 20, 1),
         covers="Gemma 3 text (Gemma3ForCausalLM): as Gemma 2 without soft-capping, plus "
                "(1 + w) q_norm/k_norm per head before RoPE; sliding layers 0 and 2 (window "
                "6) rotate with base 10000, the full layer 1 with base 1e6 and linear "
                "scaling 2. Untied, float32."),
    dict(name="olmo2-f32", model_type="olmo2", dtype="float32", seed=1021,
         config=dict(num_key_value_heads=2, rms_norm_eps=1e-6),
         covers="OLMo 2 (Olmo2ForCausalLM): RMSNorm after the attention and MLP outputs "
                "(post_attention_layernorm, post_feedforward_layernorm) and none before, "
                "q_norm/k_norm over the whole q (64) and k (32) projections before RoPE, "
                "GQA 4/2, untied, float32."),
]

# Mixtures of experts (issue 16): each a built-in plugin's layer_moe over the Llama family.
MODELS += [
    dict(name="mixtral-f32", model_type="mixtral", dtype="float32", seed=1022,
         config=dict(num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2),
         covers="Mixtral (MixtralForCausalLM): every feed-forward a mixture of 8 SiLU-gated "
                "experts (block_sparse_moe.experts.N.w1/w3/w2, 64 -> 128 -> 64), the router "
                "block_sparse_moe.gate picks the top 2 by softmax score and renormalizes "
                "their weights; Mistral attention, GQA 4/2, float32."),
    dict(name="qwen2moe-f32", model_type="qwen2_moe", dtype="float32", seed=1023,
         config=dict(num_hidden_layers=3, num_key_value_heads=2, num_experts=8,
                     num_experts_per_tok=4, moe_intermediate_size=32,
                     shared_expert_intermediate_size=96, norm_topk_prob=False,
                     decoder_sparse_step=1, mlp_only_layers=[1]),
         covers="Qwen2-MoE (Qwen2MoeForCausalLM): layers 0 and 2 sparse (mlp_only_layers "
                "[1]: layer 1 a dense 128-wide MLP), top 4 of 8 experts (32 wide) by softmax "
                "score, not renormalized (norm_topk_prob false), plus a 96-wide shared expert "
                "scaled by sigmoid(shared_expert_gate(x)); q/k/v bias, GQA 4/2, float32."),
    dict(name="qwen3moe-f32", model_type="qwen3_moe", dtype="float32", seed=1024,
         config=dict(num_hidden_layers=4, head_dim=32, num_key_value_heads=2, num_experts=16,
                     num_experts_per_tok=8, moe_intermediate_size=32, norm_topk_prob=True,
                     decoder_sparse_step=2, mlp_only_layers=[3],
                     rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
         covers="Qwen3-MoE (Qwen3MoeForCausalLM): decoder_sparse_step 2 makes layers 1 and 3 "
                "sparse, mlp_only_layers [3] turns layer 3 dense again, so only layer 1 routes: "
                "top 8 of 16 experts (32 wide), weights renormalized (norm_topk_prob); Qwen3 "
                "attention (q/k norm, head_dim 32, GQA 4/2), float32."),
]
# bf16 weights: the engine against transformers on the same weights in f32
MODELS += [
    dict(name="mixtral-bf16", model_type="mixtral", dtype="bfloat16", seed=1027,
         config=dict(num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
                     vocab_size=512),
         covers="Mixtral as mixtral-f32 in bfloat16 (vocabulary 512: fewer exact ties among "
                "bf16 logits), top 2 of 8 experts."),
]
# Every layer sparse, as llama.cpp's qwen2moe / qwen3moe GGUF files are (the sources of the
# GGUF fixtures of those architectures, tools/gen_gguf_fixtures.py).
MODELS += [
    dict(name="qwen2moe-sparse-f32", model_type="qwen2_moe", dtype="float32", seed=1025,
         config=dict(num_key_value_heads=2, num_experts=8, num_experts_per_tok=4,
                     moe_intermediate_size=32, shared_expert_intermediate_size=96,
                     norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[]),
         covers="Qwen2-MoE with every layer sparse (the source of the qwen2moe GGUF fixture): "
                "top 4 of 8 experts (32 wide), not renormalized, a 96-wide shared expert "
                "behind its sigmoid gate; q/k/v bias, GQA 4/2, float32."),
    dict(name="qwen3moe-sparse-f32", model_type="qwen3_moe", dtype="float32", seed=1026,
         config=dict(head_dim=32, num_key_value_heads=2, num_experts=16, num_experts_per_tok=4,
                     moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1,
                     mlp_only_layers=[],
                     rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
         covers="Qwen3-MoE with every layer sparse (the source of the qwen3moe GGUF fixture): "
                "top 4 of 16 experts (32 wide), renormalized; q/k norm, head_dim 32, GQA 4/2, "
                "float32."),
]
# Multi-head latent attention with mixtures of experts (issue 16): DeepSeek-V2 (queries not
# compressed, as V2-Lite; softmax routing, greedy top-k, never renormalized) and DeepSeek-V3
# (q_lora_rank, sigmoid scores with a correction bias for the choice, group-limited top-k,
# renormalized, routed scaling, yarn with mscale / mscale_all_dim).
MLA_BASE = dict(kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=24,
                moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1,
                num_hidden_layers=3)
MODELS += [
    dict(name="deepseek-v2-f32", model_type="deepseek_v2", dtype="float32", seed=1028,
         config=dict(MLA_BASE, q_lora_rank=None, n_routed_experts=8, num_experts_per_tok=2,
                     topk_method="greedy", routed_scaling_factor=1.0, norm_topk_prob=False,
                     rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
         covers="DeepSeek-V2 (DeepseekV2ForCausalLM) as V2-Lite: multi-head latent attention "
                "without query compression (q_proj), a 32-wide KV latent plus an 8-dim shared "
                "rope key, per head 16 nope + 8 rope query/key dims and 24 value dims, RoPE on "
                "interleaved pairs; layer 0 a dense 128-wide MLP, layers 1-2 top 2 of 8 experts "
                "(32 wide) by softmax score, not renormalized, plus one shared expert; float32."),
    dict(name="deepseek-v3-f32", model_type="deepseek_v3", dtype="float32", seed=1029,
         config=dict(MLA_BASE, q_lora_rank=48, n_routed_experts=16, num_experts_per_tok=4,
                     n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
                     rope_interleave=True,
                     rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                          original_max_position_embeddings=64, beta_fast=32.0,
                                          beta_slow=1.0, mscale=1.0, mscale_all_dim=0.8)),
         covers="DeepSeek-V3 (DeepseekV3ForCausalLM): multi-head latent attention with query "
                "compression (q_a_proj 48, q_a_layernorm, q_b_proj), the KV latent as "
                "deepseek-v2-f32, interleaved RoPE with yarn (factor 4 over 64 positions, "
                "mscale 1, mscale_all_dim 0.8: cos/sin scaled by their ratio, the softmax scale "
                "by mscale_all_dim's square); layer 0 dense, layers 1-2 route by sigmoid score "
                "plus a random e_score_correction_bias (for the choice only), 2 of 4 groups "
                "(scored by their two best), top 4 of 16, renormalized, times 2.5, plus one "
                "shared expert; float32."),
]
MODELS += [
    dict(name="deepseek-v3-bf16", model_type="deepseek_v3", dtype="bfloat16", seed=1030,
         config=dict(MLA_BASE, q_lora_rank=48, n_routed_experts=16, num_experts_per_tok=4,
                     n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
                     rope_interleave=True, vocab_size=512,
                     rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                          original_max_position_embeddings=64, beta_fast=32.0,
                                          beta_slow=1.0, mscale=1.0, mscale_all_dim=0.8)),
         covers="DeepSeek-V3 as deepseek-v3-f32 in bfloat16 (vocabulary 512: fewer exact ties "
                "among bf16 logits); kv_b_proj stays bf16 and is read per head in place."),
]
MODELS += [
    dict(name="deepseek-v2-bf16", model_type="deepseek_v2", dtype="bfloat16", seed=1031,
         config=dict(MODELS[[m["name"] for m in MODELS].index("deepseek-v2-f32")]["config"],
                     vocab_size=512),
         covers="DeepSeek-V2 as deepseek-v2-f32 in bfloat16 (vocabulary 512); its router "
                "stored in f32 as transformers keeps it."),
    dict(name="qwen2moe-bf16", model_type="qwen2_moe", dtype="bfloat16", seed=1032,
         config=dict(MODELS[[m["name"] for m in MODELS].index("qwen2moe-f32")]["config"],
                     vocab_size=512),
         covers="Qwen2-MoE as qwen2moe-f32 in bfloat16 (vocabulary 512): the shared expert's "
                "sigmoid gate and the router in bf16."),
    dict(name="qwen3moe-bf16", model_type="qwen3_moe", dtype="bfloat16", seed=1033,
         config=dict(MODELS[[m["name"] for m in MODELS].index("qwen3moe-f32")]["config"],
                     vocab_size=512),
         covers="Qwen3-MoE as qwen3moe-f32 in bfloat16 (vocabulary 512)."),
]
# A model with a tokenizer and a chat template (for the text / chat paths: the CLI's -p and
# --chat, an OpenAI-style server): the byte-level BPE tokenizer fixture plus two ChatML special
# tokens, and a vocabulary of exactly the tokenizer's ids (every id the model can produce
# decodes). Besides the random prompts, one prompt is the chat template applied to a
# conversation, so the references include a chat turn's greedy continuation.
CHATML = ("{% for message in messages %}"
          "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
          " + '\n' }}"
          "{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
MODELS += [
    dict(name="llama-chat-f32", model_type="llama", dtype="float32", seed=1034,
         config=dict(vocab_size=612, max_position_embeddings=512),
         tokenizer=dict(base="tests/fixtures/tokenizers/bpe_gpt2.json",
                        added=["<|im_start|>", "<|im_end|>"],
                        bos_token="<|begin_of_text|>", eos_token="<|im_end|>",
                        chat_template=CHATML,
                        chat_prompts=[[{"role": "system", "content": "You are terse."},
                                       {"role": "user", "content": "hello"}]]),
         covers="Llama as llama-mha-f32 with a tokenizer and a chat template: tokenizer.json "
                "is tests/fixtures/tokenizers/bpe_gpt2.json (byte-level BPE, 610 ids with "
                "<|begin_of_text|> 0, <|end_of_text|> 1) plus special tokens <|im_start|> 610 "
                "and <|im_end|> 611; vocab_size 612 = the tokenizer's ids; "
                "tokenizer_config.json has a ChatML chat_template, bos <|begin_of_text|>, eos "
                "<|im_end|> (config and generation_config carry no eos). Prompt 3 is the chat "
                "template applied to a system + user turn with the generation prompt. "
                "max_position_embeddings 512, float32."),
]
# Minimum gap between the top_k-th and the next router score at every routed token: below it
# a last-bit difference could pick another expert.
MOE_MIN_ROUTER_GAP = 1e-4
# Largest bf16-vs-f32 logit gap of a bf16 MoE fixture (DeepSeek): beyond it the bf16 run chose
# other experts somewhere (the dense bf16 fixtures' gaps reach 0.21).
MOE_BF16_MAX_GAP = 0.3

# transformers' model types whose RMSNorm scales by (1 + w)
OFFSET_NORM_TYPES = ("gemma", "gemma2", "gemma3_text")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def versions():
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
    }


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tokenizer_texts(spec):
    """(tokenizer.json, tokenizer_config.json) text of spec["tokenizer"]: the base
    tokenizer.json with spec's added special tokens appended to added_tokens at the next ids
    (laid out as the base file's own), and a tokenizer_config.json with the chat template and
    the special tokens. The model's vocabulary must be exactly the tokenizer's ids."""
    t = spec["tokenizer"]
    with open(os.path.join(REPO, t["base"]), encoding="utf-8") as f:
        tok = json.load(f)
    known = dict(tok["model"]["vocab"])
    for a in tok["added_tokens"]:
        assert known.get(a["content"], a["id"]) == a["id"], a
        known[a["content"]] = a["id"]
    n = len(set(known.values()))
    assert set(known.values()) == set(range(n)), "base tokenizer ids are not 0..n-1"
    for content in t["added"]:
        assert content not in known, content
        tok["added_tokens"].append(dict(id=n, content=content, single_word=False, lstrip=False,
                                        rstrip=False, normalized=False, special=True))
        known[content] = n
        n += 1
    cfg = {**spec.get("base", BASE), **spec["config"]}
    assert n == cfg["vocab_size"], (spec["name"], "tokenizer ids", n, "!= vocab_size",
                                    cfg["vocab_size"])
    tcfg = dict(
        tokenizer_class="PreTrainedTokenizerFast",
        bos_token=t["bos_token"],
        eos_token=t["eos_token"],
        pad_token=None,
        unk_token=None,
        add_bos_token=False,
        add_eos_token=False,
        clean_up_tokenization_spaces=False,
        model_max_length=cfg["max_position_embeddings"],
        chat_template=t["chat_template"],
    )
    for k in ("bos_token", "eos_token"):
        assert tcfg[k] in known, (k, tcfg[k])
    return (json.dumps(tok, indent=2, ensure_ascii=False) + "\n",
            json.dumps(tcfg, indent=2, ensure_ascii=False) + "\n")


def write_tokenizer(d, spec):
    texts = tokenizer_texts(spec)
    for name, text in zip(("tokenizer.json", "tokenizer_config.json"), texts):
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            f.write(text)


def load_tokenizer(d):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(d)


def chat_ids(tok, messages):
    """apply_chat_template with the generation prompt, as ids (and the text)."""
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):  # a BatchEncoding (transformers 5's return_dict default)
        ids = ids["input_ids"]
    ids = list(ids)
    assert ids == tok(text, add_special_tokens=False)["input_ids"], (text, ids)
    return ids, text


def make_chat_prompts(spec):
    """The ids and texts of spec["tokenizer"]["chat_prompts"] through the tokenizer as
    transformers loads it from the files written for the fixture."""
    if "tokenizer" not in spec:
        return []
    tmp = tempfile.mkdtemp()
    try:
        write_tokenizer(tmp, spec)
        tok = load_tokenizer(tmp)
        return [(msgs,) + chat_ids(tok, msgs)
                for msgs in spec["tokenizer"].get("chat_prompts", [])]
    finally:
        shutil.rmtree(tmp)


def verify_tokenizer(d, spec, chats, prompts):
    """The written tokenizer loads in `tokenizers` and transformers, its added tokens encode
    as single special ids, and the chat prompts re-encode to the stored prompts."""
    import tokenizers
    t = spec["tokenizer"]
    raw = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    vocab = cfg["vocab_size"]
    assert raw.get_vocab_size(with_added_tokens=True) == vocab
    base = tokenizers.Tokenizer.from_file(os.path.join(REPO, t["base"]))
    n_base = base.get_vocab_size(with_added_tokens=True)
    special = {c: n_base + i for i, c in enumerate(t["added"])}
    for c, i in special.items():
        assert raw.token_to_id(c) == i, (c, raw.token_to_id(c), i)
        assert raw.encode(c).ids == [i], (c, raw.encode(c).ids)
    tok = load_tokenizer(d)
    assert len(tok) == vocab, (len(tok), vocab)
    assert tok.bos_token == t["bos_token"] and tok.eos_token == t["eos_token"]
    assert tok.eos_token_id == raw.token_to_id(t["eos_token"])
    samples = ["hello", "Hello, world! 123", " two  spaces\tand\nnewline",
               "".join(t["added"]) + "x", "%suser\nhi%s" % tuple(t["added"][:2]),
               "caf\u00e9 \u00fcber \u65e5\u672c"]
    for text in samples:
        ids = raw.encode(text).ids
        assert tok(text)["input_ids"] == ids, (text, tok(text)["input_ids"], ids)
        assert all(0 <= x < vocab for x in ids)
        # the base tokenizer gives the same ids where no new special token occurs
        if not any(c in text for c in t["added"]):
            assert base.encode(text).ids == ids, text
    ids = raw.encode("%suser\nhi%s" % tuple(t["added"][:2])).ids
    assert ids[0] == special[t["added"][0]] and ids[-1] == special[t["added"][1]], ids
    assert not set(ids[1:-1]) & set(special.values()), ids
    for (msgs, want, text), p in zip(chats, prompts[len(prompts) - len(chats):]):
        assert p == want
        got, got_text = chat_ids(tok, msgs)
        assert got == want and got_text == text, (got, want)
        assert raw.encode(text).ids == want
    # the model's configs name no eos / bos: the references stay plain argmax decoding
    with open(os.path.join(d, "generation_config.json")) as f:
        gen = json.load(f)
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        assert cfg.get(k) is None and gen.get(k) is None, (k, cfg.get(k), gen.get(k))


def build_config(spec):
    cfg = dict(spec.get("base", BASE))
    cfg.update(spec["config"])
    cls = AutoConfig.for_model(spec["model_type"], **cfg)
    return cls


def init_weights(model, seed, emb_std, norm_offset=0.0):
    """Random init with a scale at which the network's output depends visibly
    on every part (logits far from uniform, norms/biases matter). norm_offset:
    what the model adds to its RMSNorm weights (Gemma: 1), subtracted here so
    the effective norm scale is U(0.8, 1.2) for every model."""
    from transformers.pytorch_utils import Conv1D
    g = torch.Generator().manual_seed(seed)
    hidden = model.config.hidden_size
    with torch.no_grad():
        # named_parameters() drops the tied duplicate (lm_head.weight when tied).
        for name, p in model.named_parameters():
            shape = p.shape
            owner = model.get_submodule(name.rsplit(".", 1)[0])
            if "embed_tokens" in name or name.endswith(("wte.weight", "wpe.weight")):
                w = emb_std * torch.randn(shape, generator=g)
            elif isinstance(owner, torch.nn.LayerNorm) and name.endswith(".weight"):
                w = 0.8 + 0.4 * torch.rand(shape, generator=g)
            elif name.endswith("norm.weight"):
                # RMSNorm weights (input/post_attention/final, qwen3 q/k norm)
                w = (0.8 - norm_offset) + 0.4 * torch.rand(shape, generator=g)
            elif name.endswith(".bias"):
                w = 0.3 * torch.randn(shape, generator=g)
            elif p.dim() == 2:
                # ~unit-variance outputs for unit-variance inputs, times 1.5
                fan_in = shape[0] if isinstance(owner, Conv1D) else shape[1]
                std = 1.5 / math.sqrt(fan_in)
                if "lm_head" in name:
                    std = 2.5 / math.sqrt(hidden)
                w = std * torch.randn(shape, generator=g)
            elif p.dim() == 3:
                # stacked experts [n_experts, out, in] (transformers 5 keeps them fused in
                # memory; save_pretrained writes one tensor per expert)
                w = 1.5 / math.sqrt(shape[2]) * torch.randn(shape, generator=g)
            else:
                raise RuntimeError(f"unhandled parameter {name} {tuple(shape)}")
            p.copy_(w.to(p.dtype))
        # DeepSeek-V3's correction bias (a buffer, zero at init): random, so that it matters
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_((0.2 * torch.randn(b.shape, generator=g)).to(b.dtype))


MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")


def impl_kwargs(spec):
    """MoE models run their experts one at a time (transformers' eager loop: ascending
    expert order, index_add of the weighted outputs), which also runs in float64."""
    return {"experts_implementation": "eager"} if spec["model_type"] in MOE_TYPES else {}


def spec_is_moe(model):
    """The f32 copy's routers join the gap check (and the bf16 run must route as the f32 run)
    for the bf16 MoE fixtures drawn with it: the committed Mixtral bf16 fixture was drawn
    before, and stays as drawn."""
    return model.config.model_type in ("deepseek_v2", "deepseek_v3", "qwen2_moe", "qwen3_moe")


def make_model(spec, seed):
    torch.manual_seed(seed)
    config = build_config(spec)
    model = AutoModelForCausalLM.from_config(
        config, dtype=DTYPES[spec["dtype"]], attn_implementation="eager", **impl_kwargs(spec))
    # Tied models use the embedding as lm_head too: N(0,1) there would give
    # logits with std ~8 and greedy loops of 1-3 tokens, so scale it down.
    # Gemma multiplies the (tied) embedding by sqrt(hidden) = 8 on the way in, so its
    # embeddings are smaller still (else the residual stream is the input token and greedy
    # repeats it).
    emb_std = spec.get("emb_std", 0.35 if config.tie_word_embeddings else 1.0)
    init_weights(model, seed, emb_std,
                 1.0 if spec["model_type"] in OFFSET_NORM_TYPES else 0.0)
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    model.generation_config.pad_token_id = None
    return model


def make_prompts(spec, seed, vocab):
    g = torch.Generator().manual_seed(seed + 7777)
    lens = spec.get("prompt_lens", (5, 11, 1))
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens]


def reset_rope_state(model):
    """HF's dynamic RoPE keeps state (inv_freq grown to the longest sequence
    seen).  A forward pass at position 0 only triggers HF's own reset branch,
    so every reference computation starts from the freshly-loaded state."""
    with torch.no_grad():
        model(torch.tensor([[0]]), use_cache=False)


@torch.no_grad()
def prompt_logits(model, prompt):
    reset_rope_state(model)
    out = model(torch.tensor([prompt]), use_cache=False)
    return out.logits[0].float().numpy()


def top2_margin(row):
    v = torch.topk(row.float(), 2).values
    return float(v[0] - v[1])


@torch.no_grad()
def greedy(model, prompt):
    """model.generate greedy, 32 new tokens, KV cache; returns tokens and the
    top1-top2 margin of the raw logits at each step."""
    reset_rope_state(model)
    ids = torch.tensor([prompt])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=False,
        max_new_tokens=N_NEW, min_new_tokens=N_NEW, eos_token_id=None,
        pad_token_id=0, use_cache=True, return_dict_in_generate=True,
        output_logits=True, top_k=None, top_p=None, temperature=None)
    toks = out.sequences[0, len(prompt):].tolist()
    assert len(toks) == N_NEW, (len(toks), N_NEW)
    margins = []
    for step, lg in enumerate(out.logits):
        row = lg[0]
        # no logits processor may have changed the choice: token == argmax
        assert int(torch.argmax(row)) == toks[step], (step, int(torch.argmax(row)), toks[step])
        margins.append(top2_margin(row))
    return toks, margins


@torch.no_grad()
def greedy_nocache(model, prompt):
    """Greedy decoding by re-running the full sequence every step (no cache)."""
    seq = list(prompt)
    toks, margins = [], []
    for _ in range(N_NEW):
        reset_rope_state(model)
        lg = model(torch.tensor([seq]), use_cache=False).logits[0, -1]
        t = int(torch.argmax(lg))
        toks.append(t)
        margins.append(top2_margin(lg))
        seq.append(t)
    return toks, margins


class RouterGaps:
    """Forward hooks on every MoE router: the smallest gap between the top_k-th and the
    (top_k + 1)-th softmax score of any routed token while active."""

    def __init__(self, model):
        self.min_gap = math.inf
        self.handles = []
        self.attach(model)

    def attach(self, model):
        """Also watch another model's routers (the f32 copy of a bf16 model: its routing is
        the reference the engine's f32 compute must reproduce)."""
        for m in model.modules():
            name = type(m).__name__
            if name.endswith("TopKRouter") or name.endswith("TopkRouter"):
                self.handles.append(m.register_forward_hook(self.hook))

    @staticmethod
    def boundary_gap(scores, k):
        if k >= scores.shape[-1]:
            return math.inf
        v = torch.sort(scores, dim=-1, descending=True).values
        return float((v[:, k - 1] - v[:, k]).min())

    def hook(self, module, inputs, output):
        logits = output[0] if isinstance(output, tuple) else output
        logits = logits.float()
        k = module.top_k
        name = type(module).__name__
        if name.startswith("DeepseekV3"):
            # the choice: sigmoid + correction bias, within the best topk_group groups (each
            # scored by its two best)
            choice = logits.sigmoid() + module.e_score_correction_bias.float()
            groups, per = module.num_group, choice.shape[-1] // module.num_group
            gs = choice.view(-1, groups, per).topk(2, dim=-1)[0].sum(dim=-1)
            self.min_gap = min(self.min_gap, self.boundary_gap(gs, module.topk_group))
            keep = torch.zeros_like(gs).scatter_(1, gs.topk(module.topk_group, dim=-1)[1], 1)
            mask = keep.unsqueeze(-1).expand(-1, groups, per).reshape(choice.shape).bool()
            p = choice.masked_fill(~mask, -1e30)
        elif name.startswith("DeepseekV2") and module.topk_method == "group_limited_greedy":
            sc = torch.softmax(logits, dim=-1)
            groups, per = module.num_group, sc.shape[-1] // module.num_group
            gs = sc.view(-1, groups, per).max(dim=-1).values
            self.min_gap = min(self.min_gap, self.boundary_gap(gs, module.topk_group))
            keep = torch.zeros_like(gs).scatter_(1, gs.topk(module.topk_group, dim=-1)[1], 1)
            mask = keep.unsqueeze(-1).expand(-1, groups, per).reshape(sc.shape).bool()
            p = sc.masked_fill(~mask, 0.0)
        else:
            p = torch.softmax(logits, dim=-1)
        self.min_gap = min(self.min_gap, self.boundary_gap(p, k))

    def close(self):
        for h in self.handles:
            h.remove()


def acceptable(greedys, margins_f32, margins_lp):
    """Seed acceptance: no prompt collapses to < MIN_DISTINCT distinct tokens,
    the f32-compute greedy path never has a near tie, and the bf16 one never
    has an exact tie."""
    for toks in greedys:
        if len(set(toks)) < MIN_DISTINCT:
            return False, f"only {len(set(toks))} distinct tokens"
    m = min(min(ms) for ms in margins_f32)
    if m < F32_MIN_MARGIN:
        return False, f"f32 greedy margin {m:.2e}"
    if margins_lp is not None:
        m = min(min(ms) for ms in margins_lp)
        if m <= 0.0:
            return False, "bf16 greedy has an exact tie"
    return True, ""


def legacy_config(cfg):
    """Pre-transformers-5 spelling of a config dict."""
    d = copy.deepcopy(cfg)
    rp = d.pop("rope_parameters", None) or {}
    if "full_attention" in rp:  # per layer type (Gemma 3): v4 had a local base frequency
        d["rope_local_base_freq"] = rp.get("sliding_attention", {}).get("rope_theta", 10000.0)
        rp = dict(rp["full_attention"])
    if "partial_rotary_factor" in rp:  # v4 kept it at the top level
        d["partial_rotary_factor"] = rp.pop("partial_rotary_factor")
    if rp.get("rope_type") == "longrope":  # v4 spelled longrope's kind "type"
        rp["type"] = rp.pop("rope_type")
    d["rope_theta"] = rp.pop("rope_theta", 10000.0)
    if rp.get("rope_type", "default") == "default" and len(rp) <= 1:
        d["rope_scaling"] = None
    else:
        d["rope_scaling"] = rp
    if "dtype" in d:
        d["torch_dtype"] = d.pop("dtype")
    return dict(sorted(d.items()))


def compute_all(model, prompts, is_bf16, gaps=None):
    res = {"logits": [prompt_logits(model, p) for p in prompts]}
    gm = [greedy(model, p) for p in prompts]
    res["greedy"] = [t for t, _ in gm]
    res["margins"] = [m for _, m in gm]
    if is_bf16:
        mf = copy.deepcopy(model).float()
        if gaps is not None and spec_is_moe(model):
            gaps.attach(mf)
        res["logits_f32"] = [prompt_logits(mf, p) for p in prompts]
        gf = [greedy(mf, p) for p in prompts]
        res["greedy_f32"] = [t for t, _ in gf]
        res["margins_f32"] = [m for _, m in gf]
        ref_f32 = mf
    else:
        ref_f32 = model
    nc = [greedy_nocache(ref_f32, p) for p in prompts]
    res["nocache"] = [t for t, _ in nc]
    res["margins_nocache"] = [m for _, m in nc]
    # float64 run of the same weights: how far f32 itself is from "exact"
    md = copy.deepcopy(ref_f32).double()
    res["logits_f64"] = [prompt_logits(md, p) for p in prompts]
    return res


def dump_json(obj):
    """JSON with one line per innermost list (token ids, margins)."""
    def enc(v, ind):
        pad = " " * ind
        if isinstance(v, dict):
            items = [f'{pad}  {json.dumps(k)}: {enc(x, ind + 2)}' for k, x in v.items()]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        if isinstance(v, list) and v and all(isinstance(x, (list, dict)) for x in v):
            items = [f"{pad}  {enc(x, ind + 2)}" for x in v]
            return "[\n" + ",\n".join(items) + "\n" + pad + "]"
        if isinstance(v, list) and v and all(isinstance(x, str) for x in v) and len(v) > 1:
            items = [f"{pad}  {json.dumps(x)}" for x in v]
            return "[\n" + ",\n".join(items) + "\n" + pad + "]"
        return json.dumps(v)
    text = enc(obj, 0) + "\n"
    assert json.loads(text) == obj
    return text


def fmt(x):
    return float(f"{x:.3g}")


def generate_one(spec, out_dir, verify):
    name = spec["name"]
    is_bf16 = spec["dtype"] == "bfloat16"
    tries = []
    chats = make_chat_prompts(spec)  # [(messages, ids, text)]
    for k in range(MAX_SEED_TRIES):
        seed = spec["seed"] + 100000 * k
        model = make_model(spec, seed)
        prompts = make_prompts(spec, spec["seed"], model.config.vocab_size)
        prompts += [ids for _, ids, _ in chats]
        gaps = RouterGaps(model)
        res = compute_all(model, prompts, is_bf16, gaps)
        gaps.close()
        ok, why = acceptable(
            res["greedy_f32"] if is_bf16 else res["greedy"],
            res["margins_f32"] if is_bf16 else res["margins"],
            res["margins"] if is_bf16 else None)
        if ok and gaps.min_gap < MOE_MIN_ROUTER_GAP:
            ok, why = False, f"router gap {gaps.min_gap:.2e}"
        if is_bf16 and ok:
            d = [len(set(t)) for t in res["greedy"]]
            if min(d) < MIN_DISTINCT:
                ok, why = False, "bf16 greedy collapsed"
        if is_bf16 and ok and spec_is_moe(model):
            # transformers' own bf16 run must route as its f32 run does, or comparing the
            # engine (f32 compute) with it measures expert flips, not rounding
            gap = max(float(np.abs(a - b).max()) for a, b in zip(res["logits"], res["logits_f32"]))
            if gap > MOE_BF16_MAX_GAP:
                ok, why = False, f"bf16 vs f32 logits {gap:.3g} (routing differs)"
        if ok:
            break
        tries.append(f"seed {seed}: {why}")
    else:
        raise RuntimeError(f"{name}: no acceptable seed: {tries}")

    d = os.path.join(out_dir, spec.get("subdir", ""), name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    kw = {"safe_serialization": True}
    if "shard" in spec:
        kw["max_shard_size"] = spec["shard"]
    model.save_pretrained(d, **kw)
    if "tokenizer" in spec:
        write_tokenizer(d, spec)
    del model
    # All stored references come from the checkpoint as a user loads it.
    # (CPU matmul kernels can round differently depending on the memory
    # alignment of the weights, so an in-memory model and the same weights
    # loaded from the file may differ in the last bit.)
    model = load(d, spec)
    res = compute_all(model, prompts, is_bf16)
    ok2, why2 = acceptable(
        res["greedy_f32"] if is_bf16 else res["greedy"],
        res["margins_f32"] if is_bf16 else res["margins"],
        res["margins"] if is_bf16 else None)
    assert ok2, (name, "reloaded model fails the seed criteria", why2)

    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(d, "config.v4.json"), "w") as f:
        json.dump(legacy_config(cfg), f, indent=2)
        f.write("\n")

    for i, lg in enumerate(res["logits"]):
        np.save(os.path.join(d, f"logits_{i}.npy"), lg.astype(np.float32))
    if is_bf16:
        for i, lg in enumerate(res["logits_f32"]):
            np.save(os.path.join(d, f"logits_f32_{i}.npy"), lg.astype(np.float32))

    # statistics for the README / notes
    f32_logits = res["logits_f32"] if is_bf16 else res["logits"]
    stats = {
        "max_abs_logit": fmt(max(float(np.abs(x).max()) for x in f32_logits)),
        "logit_std": fmt(float(np.concatenate([x.ravel() for x in f32_logits]).std())),
        "f32_vs_f64_max_abs": fmt(max(float(np.abs(a - b).max()) for a, b in
                                      zip(f32_logits, res["logits_f64"]))),
        "distinct_greedy_tokens": [len(set(t)) for t in res["greedy"]],
        "min_greedy_margin": fmt(min(min(m) for m in res["margins"])),
        "seed": seed,
        "rejected_seeds": tries,
    }
    if is_bf16:
        stats["bf16_vs_f32_max_abs"] = fmt(max(float(np.abs(a - b).max()) for a, b in
                                               zip(res["logits"], res["logits_f32"])))
        stats["bf16_vs_f32_mean_abs"] = fmt(float(np.mean(np.concatenate(
            [np.abs(a - b).ravel() for a, b in zip(res["logits"], res["logits_f32"])]))))
        stats["min_greedy_margin_f32"] = fmt(min(min(m) for m in res["margins_f32"]))
        stats["greedy_bf16_equals_greedy_f32"] = [a == b for a, b in
                                                  zip(res["greedy"], res["greedy_f32"])]
        first_div = []
        for a, b in zip(res["greedy"], res["greedy_f32"]):
            first_div.append(next((j for j in range(N_NEW) if a[j] != b[j]), None))
        stats["greedy_bf16_first_divergence"] = first_div
    ref_greedy = res["greedy_f32"] if is_bf16 else res["greedy"]
    stats["greedy_cache_equals_nocache"] = [a == b for a, b in zip(ref_greedy, res["nocache"])]

    v = versions()
    notes = [
        f"{spec['covers']}",
        "Random weights (seed %d): embeddings %s; linear weights "
        "N(0, (1.5/sqrt(fan_in))^2), lm_head N(0, (2.5/sqrt(hidden))^2); biases "
        "N(0, 0.3^2); RMSNorm weights U(0.8, 1.2)%s." % (
            seed,
            "N(0,%g^2) (tied; multiplied by sqrt(hidden) on input)" % spec["emb_std"]
            if "emb_std" in spec else "N(0,1) (N(0,0.35^2) when tied)",
            " as effective scale (Gemma stores w with scale 1 + w: "
            "w ~ U(-0.2, 0.2))" if spec["model_type"] in OFFSET_NORM_TYPES else ""),
        "prompts are token ids fed as-is: no BOS is added, no tokenizer exists."
        if "tokenizer" not in spec else
        "prompts are token ids fed as-is (no BOS is added); tokenizer.json is %s plus the "
        "special tokens %s at the next ids; prompts %s are the chat template of "
        "tokenizer_config.json applied to chat_prompts[k].messages with "
        "add_generation_prompt, encoded (chat_prompts[k].text)." % (
            spec["tokenizer"]["base"], ", ".join(spec["tokenizer"]["added"]),
            ", ".join(str(len(prompts) - len(chats) + k) for k in range(len(chats)))),
        "logits_<i>.npy: float32 [len(prompt_i), vocab], one forward pass "
        "(transformers, eager attention, CPU, use_cache=False) over prompt i "
        "alone, in the checkpoint dtype %s." % spec["dtype"],
        "greedy: model.generate(do_sample=False, max_new_tokens=32, "
        "min_new_tokens=32, eos/pad not set so nothing stops early), with KV "
        "cache; each token was checked to equal argmax of the raw logits. "
        "greedy_margin[i][t] = top1 - top2 raw logit at step t.",
    ]
    if is_bf16:
        notes.append(
            "bfloat16 checkpoint: logits_<i>.npy and greedy were computed with "
            "the model in bfloat16 exactly as transformers runs it on CPU "
            "(logits cast to float32 for storage). logits_f32_<i>.npy, "
            "greedy_f32 and greedy_margin_f32 use the same bf16 weights "
            "upcast to float32 (model.float()).")
    if spec["name"] == "llama-rope-dynamic":
        notes.append(
            "Dynamic NTK in transformers is stateful: a forward call whose "
            "max position + 1 = L > max_position_embeddings (16) computes "
            "inv_freq with base' = theta * ((factor*L/16) - (factor-1))^(d/(d-2)) "
            "for ALL positions of that call; keys already in the KV cache keep "
            "the rotation they got when they were computed. 'greedy' follows "
            "this (prefill of the prompt, then one token per call, so a token "
            "at position p >= 16 is rotated with L = p+1). 'greedy_nocache' "
            "re-runs the full sequence every step instead (all positions use "
            "L = current length). logits_<i> come from one call over the "
            "prompt alone (L = len(prompt_i)).")
    ref = {
        "model": name,
        "architecture": cfg.get("architectures", [None])[0],
        "dtype": spec["dtype"],
        "num_parameters": model.num_parameters(),
        "prompts": prompts,
        "greedy": res["greedy"],
        "greedy_margin": [[fmt(x) for x in m] for m in res["margins"]],
    }
    if is_bf16:
        ref["greedy_f32"] = res["greedy_f32"]
        ref["greedy_margin_f32"] = [[fmt(x) for x in m] for m in res["margins_f32"]]
    if spec["name"] == "llama-rope-dynamic":
        ref["greedy_nocache"] = res["nocache"]
        ref["greedy_nocache_margin"] = [[fmt(x) for x in m] for m in res["margins_nocache"]]
    if chats:
        ref["chat_prompts"] = [
            {"prompt": len(prompts) - len(chats) + k, "messages": msgs, "text": text}
            for k, (msgs, _, text) in enumerate(chats)]
    ref["logits_files"] = [f"logits_{i}.npy" for i in range(len(prompts))]
    if is_bf16:
        ref["logits_f32_files"] = [f"logits_f32_{i}.npy" for i in range(len(prompts))]
    ref.update({
        "seed": seed,
        "transformers": v["transformers"],
        "torch": v["torch"],
        "attn_implementation": "eager",
        "device": "cpu",
        "stats": stats,
        "notes": notes,
    })
    with open(os.path.join(d, "reference.json"), "w") as f:
        f.write(dump_json(ref))

    if verify:
        verify_one(d, spec, prompts, res)
        if "tokenizer" in spec:
            verify_tokenizer(d, spec, chats, prompts)
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    stats["dir_bytes"] = size
    return stats


# Per model: config change that switches the covered feature off, and which
# prompts' logits must then change (position ranges).  Guards against a
# fixture that silently does not exercise what it claims to.
FEATURE_OFF = {
    "llama-rope-linear": ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
                          {0: "1:", 1: "1:", 2: None}),
    "llama-rope-dynamic": ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
                           {0: None, 1: "1:", 2: None}),
    "llama-rope-llama3": ({"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}},
                          {0: "1:", 1: "1:", 2: None}),
    "llama-rope-yarn": ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
                        {0: "1:", 1: "1:", 2: None}),
    "mistral-swa-f32": ({"sliding_window": None}, {0: None, 1: "8:", 2: None}),
    "gemma2-f32": ({"attn_logit_softcapping": None, "final_logit_softcapping": None},
                   {0: "0:", 1: "0:", 2: "0:"}),
    "phi3-f32": ({"rope_parameters": dict(PHI3_LONGROPE, short_factor=[1.0] * 4,
                                          long_factor=[1.0] * 4),
                  "original_max_position_embeddings": 64},
                 {0: "1:", 1: "1:", 2: None}),
}


@torch.no_grad()
def check_feature_matters(d, spec, prompts):
    if spec["name"] not in FEATURE_OFF:
        return
    change, expect = FEATURE_OFF[spec["name"]]
    cfg = AutoConfig.from_pretrained(d)
    for k, v in change.items():
        setattr(cfg, k, v)
    m = AutoModelForCausalLM.from_pretrained(d, config=cfg, attn_implementation="eager").eval()
    for i, p in enumerate(prompts):
        got = prompt_logits(m, p)
        want = np.load(os.path.join(d, f"logits_{i}.npy"))
        diff = np.abs(got - want).max(axis=1)  # per position
        start = None if expect[i] is None else int(expect[i].rstrip(":"))
        for pos in range(len(p)):
            if start is not None and pos >= start:
                assert diff[pos] > 1e-2, (spec["name"], i, pos, "feature has no effect", diff[pos])
            else:
                assert diff[pos] < 1e-5, (spec["name"], i, pos, "feature changes too much", diff[pos])


def load(src, spec):
    m = AutoModelForCausalLM.from_pretrained(src, attn_implementation="eager", **impl_kwargs(spec))
    m.eval()
    want_dt = DTYPES[spec["dtype"]]
    assert m.dtype == want_dt, (src, m.dtype, want_dt)
    m.generation_config.eos_token_id = None
    m.generation_config.bos_token_id = None
    m.generation_config.pad_token_id = None
    return m


@torch.no_grad()
def verify_one(d, spec, prompts, res):
    """Reload from disk (both config spellings); logits must be bit-identical
    to what was stored, and the checkpoint must be in the right format."""
    is_bf16 = spec["dtype"] == "bfloat16"
    files = sorted(os.listdir(d))
    if "shard" in spec:
        shards = [f for f in files if f.startswith("model-") and f.endswith(".safetensors")]
        assert 2 <= len(shards) <= 3, shards
        assert "model.safetensors.index.json" in files and "model.safetensors" not in files
    else:
        assert "model.safetensors" in files, files
    for cfg_name in ("config.json", "config.v4.json"):
        if cfg_name == "config.json":
            src = d
        else:
            src = tempfile.mkdtemp()
            for f in files:
                if f != "config.json" and not f.endswith(".npy"):
                    shutil.copy(os.path.join(d, f), src)
            shutil.copy(os.path.join(d, "config.v4.json"), os.path.join(src, "config.json"))
        m = load(src, spec)
        for i, p in enumerate(prompts):
            got = prompt_logits(m, p)
            want = np.load(os.path.join(d, f"logits_{i}.npy"))
            assert np.array_equal(got, want), (spec["name"], cfg_name, i, np.abs(got - want).max())
            assert np.array_equal(got, res["logits"][i])
        if is_bf16:
            mf = m.float()
            for i, p in enumerate(prompts):
                got = prompt_logits(mf, p)
                want = np.load(os.path.join(d, f"logits_f32_{i}.npy"))
                assert np.array_equal(got, want), (spec["name"], cfg_name, "f32", i)
        if cfg_name != "config.json":
            shutil.rmtree(src)
    check_feature_matters(d, spec, prompts)
    # tied checkpoints must not carry a separate lm_head tensor
    from safetensors import safe_open
    names = set()
    for f in files:
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(d, f), "pt") as sf:
                names |= set(sf.keys())
                for k in sf.keys():
                    assert sf.get_slice(k).get_dtype() in ("F32", "BF16")
    tied = {**spec.get("base", BASE), **spec["config"]}.get("tie_word_embeddings", False)
    assert ("lm_head.weight" in names) == (not tied), (spec["name"], tied)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/models")
    ap.add_argument("--only", default="")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--no-readme", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(1)  # single-threaded CPU kernels: reproducible sums
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    os.makedirs(args.out, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    unknown = only - {s["name"] for s in MODELS}
    if unknown:
        sys.exit(f"unknown model(s): {sorted(unknown)}")

    stats_path = os.path.join(args.out, "stats.json")
    all_stats = {}
    if os.path.exists(stats_path):
        with open(stats_path) as f:
            all_stats = json.load(f).get("models", {})
    for spec in MODELS:
        if only and spec["name"] not in only:
            continue
        st = generate_one(spec, args.out, not args.no_verify)
        all_stats[spec["name"]] = st
        extra = ""
        if "bf16_vs_f32_max_abs" in st:
            extra = f" bf16-vs-f32 max|d|={st['bf16_vs_f32_max_abs']}"
        print(f"{spec['name']:22s} seed={st['seed']} {st['dir_bytes']/1024:7.1f} KiB "
              f"max|logit|={st['max_abs_logit']} distinct={st['distinct_greedy_tokens']} "
              f"margin={st['min_greedy_margin']} f32-vs-f64={st['f32_vs_f64_max_abs']}{extra}",
              flush=True)

    v = versions()
    with open(os.path.join(args.out, "versions.json"), "w") as f:
        json.dump(v, f, indent=2)
        f.write("\n")
    all_stats = {s["name"]: all_stats[s["name"]] for s in MODELS if s["name"] in all_stats}
    with open(stats_path, "w") as f:
        json.dump({"versions": v, "models": all_stats}, f, indent=1)
        f.write("\n")
    if not args.no_readme and len(all_stats) == len(MODELS):
        write_readme(args.out, v, all_stats)
    total = 0
    for root, _, fs in os.walk(args.out):
        total += sum(os.path.getsize(os.path.join(root, x)) for x in fs)
    print(f"total {total/1024/1024:.2f} MiB in {args.out}")


def write_readme(out, v, stats):
    rows = []
    for s in MODELS:
        st = stats[s["name"]]
        rows.append(f"| `{s['name']}` | {s['dtype']} | {s['covers']} |")
    drows = []
    for s in MODELS:
        st = stats[s["name"]]
        if s["dtype"] != "bfloat16":
            continue
        drows.append(
            f"| `{s['name']}` | {st['max_abs_logit']} | {st['bf16_vs_f32_max_abs']} | "
            f"{st['bf16_vs_f32_mean_abs']} | {st['greedy_bf16_first_divergence']} |")
    frows = []
    for s in MODELS:
        st = stats[s["name"]]
        frows.append(
            f"| `{s['name']}` | {st['max_abs_logit']} | {st['logit_std']} | "
            f"{st['f32_vs_f64_max_abs']} | {st['min_greedy_margin']}"
            f"{' (f32: ' + str(st['min_greedy_margin_f32']) + ')' if 'min_greedy_margin_f32' in st else ''} | "
            f"{st['distinct_greedy_tokens']} | {st['dir_bytes'] // 1024} |")
    bf16_worst = max(stats[s["name"]]["bf16_vs_f32_max_abs"] for s in MODELS
                     if s["dtype"] == "bfloat16")
    bf16_bound = math.ceil(bf16_worst * 1.5 * 20) / 20  # round up to 0.05
    text = README_TEMPLATE.format(
        torch=v["torch"], transformers=v["transformers"], safetensors=v["safetensors"],
        numpy=v["numpy"], python=v["python"], n_new=N_NEW,
        model_rows="\n".join(rows), bf16_rows="\n".join(drows), f32_rows="\n".join(frows),
        margin=F32_MIN_MARGIN, distinct=MIN_DISTINCT,
        bf16_worst=bf16_worst, bf16_bound=bf16_bound)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(text)


README_TEMPLATE = """\
# Tiny Hugging Face reference checkpoints

Random-weight checkpoints written by `tools/gen_fixtures.py` with PyTorch
(CPU) + transformers, and the logits / greedy tokens transformers produces for
them. The C runtime's tests load each directory as a checkpoint and compare.
Everything here is generated: do not edit by hand, regenerate instead.

## Regenerate

CI never installs torch; these files are committed. To regenerate (about
3 GB of wheels, since PyPI's Linux torch wheel pulls the CUDA libraries; CPU is
all that is used):

```sh
python3 -m venv /tmp/fixenv
/tmp/fixenv/bin/pip install -r tools/requirements-fixtures.txt
/tmp/fixenv/bin/python tools/gen_fixtures.py --out tests/fixtures/models
# or a subset: ... --only llama-mha-f32,qwen3-f32
```

Generated with: torch {torch}, transformers {transformers}, safetensors
{safetensors}, numpy {numpy}, Python {python} (also in `versions.json`). The
run is deterministic (fixed seeds, single-threaded, deterministic algorithms;
two runs write identical bytes). All references are computed from the
checkpoint as `from_pretrained` loads it back from disk; the script then
reloads it again (once with `config.json`, once with `config.v4.json`) and
checks the logits are bit-identical to the stored ones, checks the tied
models have no `lm_head.weight`, and, for the RoPE-scaling and sliding-window
models, that switching the feature off in the config changes exactly the
logits it should (all positions >= 1, resp. only prompt 1 for dynamic
NTK, resp. only positions >= 8 for the window) and leaves the others equal.
A different torch version may change the last bits of the references, not
the weights.

## Layout of `<model>/`

| file | content |
| --- | --- |
| `config.json`, `generation_config.json` | as `save_pretrained` writes them (transformers {transformers}) |
| `model.safetensors` | weights (F32 or BF16); the sharded model has `model-0000k-of-00003.safetensors` + `model.safetensors.index.json` instead |
| `config.v4.json` | same config, pre-transformers-5 spelling (see below) |
| `reference.json` | `num_parameters`, `prompts`, `greedy`, `greedy_margin`, (`greedy_f32`, `greedy_margin_f32` for bf16), `dtype`, versions, `seed`, `stats`, `notes` |
| `logits_<i>.npy` | float32 `[len(prompts[i]), vocab]`: one forward pass over prompt i alone, computed in the checkpoint dtype |
| `logits_f32_<i>.npy` | bf16 models only: same, with the bf16 weights upcast to float32 (`model.float()`) |
| `tokenizer.json`, `tokenizer_config.json` | `llama-chat-f32` only: its tokenizer (a tokenizer fixture plus added special tokens) and its chat template / special tokens; `reference.json` then has `chat_prompts` |

`stats.json` at the top collects the per-model numbers quoted below.

* Prompts are raw token ids (no BOS added; there is no tokenizer). Most
  models use prompts of 5, 11 and 1 tokens; `mistral-swa-f32` uses 5, 20, 1
  and `llama-rope-dynamic` 5, 24, 1 so that prompt 1 crosses the window /
  the original context.
* `llama-chat-f32` has a tokenizer (`tokenizer.json`: every id of its
  vocabulary is a token) and a ChatML chat template. Its prompts 0-2 are
  random ids as above; prompt 3 is `apply_chat_template(messages,
  add_generation_prompt=True)` of `reference.json`'s `chat_prompts[0]`
  (`messages`, `text`), encoded by transformers' tokenizer of the directory.
  Its eos (`<|im_end|>`) is named only in `tokenizer_config.json`: greedy is
  still plain argmax over 32 tokens.
* `greedy[i]` is `model.generate(do_sample=False, max_new_tokens={n_new},
  min_new_tokens={n_new})` with the KV cache; configs carry no bos/eos/pad ids,
  so nothing stops early and no logits processor touches the logits (each
  token was checked to be the argmax of the raw logits).
* `greedy_margin[i][t]` is top1 - top2 of the raw logits at step t. Seeds
  were chosen (deterministically, first acceptable of seed, seed+100000, ...)
  so that every f32-compute greedy step has a margin >= {margin} and each
  generation has >= {distinct} distinct tokens (no collapse into one repeated
  token).

### Config spelling

transformers {transformers} writes RoPE settings as
`"rope_parameters": {{"rope_type": ..., "rope_theta": ..., "factor": ...}}` and
no longer writes top-level `rope_theta` or `rope_scaling`; it writes `"dtype"`
instead of `"torch_dtype"`. Checkpoints saved with transformers 4.x (most of
the Hub) use top-level `rope_theta` and `"rope_scaling": {{"rope_type": ...,
"factor": ...}}` (or null). Each directory also has `config.v4.json` in that
older spelling; transformers loads both into the identical model (verified).
A loader should accept both; e.g. `llama-rope-llama3` has rope_theta 500000
only inside `rope_parameters` in `config.json`.

## What each model covers

All: hidden 64, vocab 256-612, 2-3 layers, intermediate 128-192, RMSNorm eps
1e-6, SiLU MLP (Gemma: GELU-tanh), eager attention, `max_position_embeddings` 256 unless noted.

| model | dtype | covers |
| --- | --- | --- |
{model_rows}

### Semantics worth knowing

* Sliding window (`mistral-swa-f32`): transformers masks key k for query q
  unless `q - sliding_window < k <= q`, so with window 8 a token sees itself
  and the 7 previous tokens.
* Dynamic NTK (`llama-rope-dynamic`): transformers recomputes `inv_freq` per
  forward call from L = (max position in that call) + 1 when L > 16:
  `base' = theta * (factor*L/16 - (factor-1)) ** (d/(d-2))`, d = head_dim.
  Keys already in the KV cache are NOT re-rotated. So `greedy` (prefill, then
  one token per call) depends on the call pattern; `greedy_nocache`
  re-runs the full sequence each step (all positions rotated with the current
  L). The logits files use one call over the prompt (L = prompt length, so
  prompt 1 with 24 tokens is scaled, prompts 0 and 2 are not).
* YaRN: cos and sin are multiplied by `attention_factor` = 0.1 ln(factor) + 1
  (no explicit attention_factor/mscale in the config); correction range uses
  beta_fast 32, beta_slow 1, `truncate` true (floor/ceil).
* Llama `attention_bias` puts a bias on o_proj too; Qwen2 only on q/k/v.
* Qwen3 applies q_norm/k_norm (RMSNorm over head_dim, per head) before RoPE.

## Tolerances for the C tests

Measured here (per model, over all prompt positions and vocab entries):

| model | max abs logit | logit std | max abs (f32 - f64) | min greedy margin | distinct greedy tokens per prompt | dir KiB |
| --- | --- | --- | --- | --- | --- | --- |
{f32_rows}

HF's own bf16 vs f32 (same bf16 weights; bf16 compute vs `model.float()`):

| model | max abs logit | max abs (bf16 - f32) | mean abs (bf16 - f32) | first greedy step where bf16 and f32 tokens differ (per prompt; None = identical) |
| --- | --- | --- | --- | --- |
{bf16_rows}

As a one-off cross-check when these fixtures were first written (not part of
the script), an independent float64 NumPy implementation written only from the
semantics described above reproduced the f32 references (`logits_f32_<i>` for
bf16 models) of every model except the llama3/yarn ones (not implemented
there) within 1.2e-5, and every greedy list exactly, including both dynamic
NTK variants (`greedy` with the stateful KV-cache rule, `greedy_nocache`).

Suggested (the seeds guarantee every f32-compute greedy step has a top-2
margin >= {margin}, at least twice the largest f32 logit tolerance below, so
an implementation within tolerance cannot flip a greedy token):

* f32 checkpoints, f32 compute vs `logits_<i>.npy`: max abs difference
  <= 2e-4 (about 2e-5 of the max |logit| of ~10; f32 accumulation-order
  noise is ~1e-5, see the "f32 - f64" column); `greedy` identical.
* bf16 checkpoints, weights converted exactly to f32 and f32 compute vs
  `logits_f32_<i>.npy`: max abs <= 1e-3 (2e-4 should hold as well);
  `greedy_f32` identical.
* bf16 checkpoints, bf16 compute vs `logits_<i>.npy` (HF's own bf16 run):
  the two bf16 pipelines round in different places, and HF's bf16 logits are
  up to {bf16_worst} away from its own f32 ones. Use max abs <= {bf16_bound}
  (~1.5x the worst measured gap) against `logits_<i>.npy` or, better, against
  `logits_f32_<i>.npy`; compare generated tokens with `greedy` only up to the
  first step whose `greedy_margin` is below {bf16_bound} (bf16 logits near
  |8| are quantized to 0.03125, so near-ties are common).
* `llama-rope-dynamic`: `greedy` reproduces transformers' generate (KV cache,
  stateful dynamic NTK, see above); `greedy_nocache` the recompute-everything
  variant. A runtime implementing one of them should match that list.
"""


if __name__ == "__main__":
    main()
