#!/usr/bin/env python3
"""Regenerates tests/fixtures/tokenizers/gguf: tokenizer-only GGUF files (metadata, no tensors)
converted from the committed tokenizer.json fixtures of tests/fixtures/tokenizers, written with
gguf-py's GGUFWriter the way llama.cpp's convert_hf_to_gguf.py writes a model's vocabulary.
The C test (tests/tokenizer/test_tokenizer_gguf.c) loads each one and must give the ids of
NAME.expected.json (what the `tokenizers` library gives for NAME.json on the corpus).

CI never runs this. Usage (a venv outside the repository; never commit one):
    python3 -m venv /tmp/ggufenv && /tmp/ggufenv/bin/pip install gguf numpy tokenizers==0.23.3
    /tmp/ggufenv/bin/python tools/gen_gguf_tokenizers.py
`tokenizers` is only needed for the self-check below (--no-check skips it).

Files (NAME.gguf for the fixture NAME):
  bpe_gpt2    tokenizer.ggml.model "gpt2", pre "gpt-2", add_space_prefix true (the fixture's
              ByteLevel has add_prefix_space, which convert_hf_to_gguf.py records from
              tokenizer_config.json's add_prefix_space)
  bpe_smollm  "gpt2", pre "smollm", with SmolLM2's chat template and bos/eos/unk/pad ids (the chat
              template test opens it)
  bpe_llama3  "gpt2", pre "llama-bpe", add_bos_token true (its TemplateProcessing)
  bpe_qwen2   the llama3 vocabulary with pre "qwen2" (the bpe_qwen2 variant: NFC + Qwen2's regex)
  sp_llama2   tokenizer.ggml.model "llama" (SentencePiece BPE): tokens, scores, token types, no
              merges -- the reader derives the merges from the scores, as transformers'
              SentencePieceExtractor does for a tokenizer.model.

The scores of sp_llama2. The fixture's model was trained by `tokenizers` (BpeTrainer), so it has a
merge list but no SentencePiece scores. A SentencePiece BPE model ranks its pieces by score, and
the merges a reader derives are, for every piece, every split into two pieces that are both in the
vocabulary, ordered by the piece's score (descending). So each piece made by a merge gets
    score = -(rank of the merge that makes it + 1)
(the first merge's piece scores highest, -1), which puts the derived merges of each piece in the
order of the trained merges. Pieces no merge makes (the single characters of the alphabet) score
below every merged piece, -(number of merges + 1 + their position), as SentencePiece puts its
alphabet last; the control, unknown and byte tokens score 0, as in Llama 2's tokenizer.model.
The derived list has more merges than the trained one (a piece "abc" made by "ab c" also gets
"a bc" when "bc" is a token, ranked with "ab c"); the self-check builds that tokenizer.json with
`tokenizers` and asserts it gives exactly the expected ids of sp_llama2 on every case, so the C
test's comparison with sp_llama2.expected.json is a comparison with the tokenizer.json that the
GGUF file describes.
"""
import argparse
import json
import os
import sys

import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "tests", "fixtures", "tokenizers")
OUT = os.path.join(FIX, "gguf")
CHAT_CONFIG = os.path.join(HERE, "..", "tests", "fixtures", "chat", "smollm2_tokenizer_config.json")
T = gguf.TokenType


def load_variant(name):
    """NAME.json, or the base file of an override variant with its keys replaced."""
    with open(os.path.join(FIX, name + ".expected.json"), encoding="utf-8") as f:
        exp = json.load(f)
    with open(os.path.join(FIX, exp["tokenizer"]), encoding="utf-8") as f:
        tok = json.load(f)
    tok.update(exp.get("override", {}))
    return tok, exp


def id_list(tok):
    """The id -> token list (vocab and added tokens) and each added token's entry."""
    ids = dict((i, t) for t, i in tok["model"]["vocab"].items())
    added = {}
    for a in tok["added_tokens"]:
        ids[a["id"]] = a["content"]
        added[a["id"]] = a
    n = max(ids) + 1
    assert sorted(ids) == list(range(n)), "ids must be dense"
    return [ids[i] for i in range(n)], added


def bos_of(tok):
    """Whether the post-processor puts a special token first (add_bos_token), and its id."""
    pp = tok.get("post_processor") or {}
    if pp.get("type") != "TemplateProcessing":
        return False, None
    first = pp["single"][0].get("SpecialToken")
    if not first:
        return False, None
    return True, pp["special_tokens"][first["id"]]["ids"][0]


def bytelevel_prefix_space(tok):
    pre = tok.get("pre_tokenizer") or {}
    for p in pre.get("pretokenizers", [pre]):
        if p.get("type") == "ByteLevel":
            return bool(p.get("add_prefix_space"))
    return False


def writer(name):
    w = gguf.GGUFWriter(os.path.join(OUT, name + ".gguf"), "llama")
    w.add_name(name)
    return w


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()


def write_gpt2(name, pre, chat=None):
    tok, _ = load_variant(name)
    tokens, added = id_list(tok)
    # convert_hf_to_gguf.py: added tokens that are special are CONTROL, other added tokens
    # USER_DEFINED, the rest NORMAL
    types = [(T.CONTROL if added[i]["special"] else T.USER_DEFINED) if i in added else T.NORMAL
             for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w = writer(name)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    add_bos, bos = bos_of(tok)
    if chat:
        w.add_bos_token_id(0)
        w.add_eos_token_id(1)
        w.add_unk_token_id(0)
        w.add_pad_token_id(1)
    elif add_bos:
        w.add_bos_token_id(bos)
        w.add_eos_token_id(1)
    w.add_add_bos_token(add_bos)
    w.add_add_space_prefix(bytelevel_prefix_space(tok))
    if chat:
        w.add_chat_template(chat)
    finish(w)


def sp_scores(tok, tokens):
    """The scores described above: -(rank + 1) for a merged piece, the alphabet below them."""
    merges = [m.split(" ") if isinstance(m, str) else m for m in tok["model"]["merges"]]
    made = {}
    for rank, (a, b) in enumerate(merges):
        made.setdefault(a + b, rank)
    scores, alphabet = [], 0
    for t in tokens:
        if t in made:
            scores.append(-float(made[t] + 1))
        elif t in ("<unk>", "<s>", "</s>") or (len(t) == 6 and t.startswith("<0x")):
            scores.append(0.0)
        else:
            scores.append(-float(len(merges) + 1 + alphabet))
            alphabet += 1
    return scores


def sp_types(tokens, added):
    out = []
    for i, t in enumerate(tokens):
        if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            out.append(T.BYTE)
        elif t == "<unk>":
            out.append(T.UNKNOWN)
        elif i in added:
            out.append(T.CONTROL if added[i]["special"] else T.USER_DEFINED)
        else:
            out.append(T.NORMAL)
    return out


def derive_merges(tokens, scores):
    """The merges a SentencePiece BPE reader derives (see the module comment): for each piece in
    id order, its splits into two tokens ordered by the ids of the left then the right part;
    then all of them by score, left length, right length (all descending, ties kept in order)."""
    ids = {t: i for i, t in enumerate(tokens)}
    out = []
    for t, s in zip(tokens, scores):
        local = [(t[:k], t[k:]) for k in range(1, len(t)) if t[:k] in ids and t[k:] in ids]
        local.sort(key=lambda p: (ids[p[0]], ids[p[1]]))
        out.extend((a, b, s) for a, b in local)
    out.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [[a, b] for a, b, _ in out]


def write_sp(name, check):
    tok, exp = load_variant(name)
    tokens, added = id_list(tok)
    scores = sp_scores(tok, tokens)
    if check:
        check_sp(tok, tokens, scores, exp)
    w = writer(name)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(sp_types(tokens, added))
    ids = {t: i for i, t in enumerate(tokens)}
    w.add_bos_token_id(ids["<s>"])
    w.add_eos_token_id(ids["</s>"])
    w.add_unk_token_id(ids["<unk>"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    finish(w)


def check_sp(tok, tokens, scores, exp):
    """The tokenizer.json the GGUF file describes (derived merges) gives the expected ids."""
    from tokenizers import Tokenizer
    j = json.loads(json.dumps(tok))
    j["model"]["merges"] = derive_merges(tokens, scores)
    t = Tokenizer.from_str(json.dumps(j))
    bad = 0
    for c in exp["cases"]:
        want = c.get("ids", exp["special_prefix"] + c["ids_plain"])
        if t.encode(c["text"], add_special_tokens=False).ids != c["ids_plain"] or \
                t.encode(c["text"]).ids != want:
            bad += 1
    print("sp_llama2: %d derived merges (%d trained); %d of %d cases differ"
          % (len(j["model"]["merges"]), len(tok["model"]["merges"]), bad, len(exp["cases"])))
    if bad:
        sys.exit("the derived merges do not reproduce the expected ids")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-check", action="store_true", help="skip the tokenizers self-check")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    with open(CHAT_CONFIG, encoding="utf-8") as f:
        chat = json.load(f)["chat_template"]
    write_gpt2("bpe_gpt2", "gpt-2")
    write_gpt2("bpe_smollm", "smollm", chat=chat)
    write_gpt2("bpe_llama3", "llama-bpe")
    write_gpt2("bpe_qwen2", "qwen2")
    write_sp("sp_llama2", not args.no_check)
    for n in sorted(os.listdir(OUT)):
        size = os.path.getsize(os.path.join(OUT, n))
        assert size < 100 * 1024, n
        print("%-16s %6d bytes" % (n, size))


if __name__ == "__main__":
    main()
