#!/usr/bin/env python3
"""Regenerates tests/fixtures/tokenizers: trains small tokenizers with the Hugging Face
`tokenizers` library (pinned in tools/requirements-tokenizers.txt) on the committed corpus
(tests/fixtures/tokenizers/corpus.txt) and writes, for each variant, its tokenizer.json and the
expected ids (with and without special tokens) and decoded strings for every case.

CI never runs this; the C tests compare against what it wrote. Usage:
    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install -r tools/requirements-tokenizers.txt
    /tmp/tokvenv/bin/python tools/gen_tokenizer_fixtures.py
Variants:
  bpe_llama3  byte-level BPE, Split with the Llama-3 regex (isolated) + ByteLevel(use_regex=false),
              ignore_merges, ByteLevel decoder, TemplateProcessing with <|begin_of_text|>
  bpe_gpt2    the same model, ByteLevel(add_prefix_space, use_regex) pre-tokenizer, ByteLevel
              post-processor
  bpe_smollm  the same model, Sequence[Digits(individual_digits), ByteLevel(use_regex)]
  sp_llama2   SentencePiece-style BPE: Prepend+Replace normalizer, byte_fallback, <unk>,
              decoders Replace/ByteFallback/Fuse/Strip, TemplateProcessing with <s>
  sp_metaspace the same model with a Metaspace pre-tokenizer (prepend_scheme first) and decoder
  split_*     the llama3 model behind a Split of each behavior (and invert), on a few lines
  bpe_qwen2   the llama3 model behind Qwen2's NFC normalizer and regex (single digits)
  norm_*      the llama3 model behind NFD, NFKC, NFKD, on a few lines
  sp_regex_replace  the Llama-2 model with Regex Replace normalizer and decoder, Strip both ends
Variants that reuse another's model name it in "tokenizer" and list the keys they replace in
"override" (the test applies them to that file).
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "tokenizers")
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def corpus_lines():
    with open(os.path.join(OUT, "corpus.txt"), encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f]


def cases(lines):
    out = list(lines)
    out.append("\n".join(lines[:8]))                   # several lines: newlines between them
    out.append(lines[0] + "\n\n\n\n" + lines[1] + "\r\n\r\n" + lines[2])
    out.append("\t\n \n\t\t\n\n   \n" + lines[20] + "\n\n\t")
    out.append("")
    return out


def train_bytelevel(lines):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(vocab_size=900, min_frequency=2, show_progress=False,
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                         special_tokens=["<|begin_of_text|>", "<|end_of_text|>"])
    tok.train_from_iterator(lines, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
        special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
    return json.loads(tok.to_str())


def train_sp(lines):
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    byte_tokens = ["<0x%02X>" % i for i in range(256)]
    trainer = BpeTrainer(vocab_size=700, min_frequency=2, show_progress=False, limit_alphabet=120,
                         special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens)
    tok.train_from_iterator(lines, trainer)
    j = json.loads(tok.to_str())
    # like Llama 2: the byte tokens live in the vocab only, not as added tokens
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in ("<unk>", "<s>", "</s>")]
    bos = j["model"]["vocab"]["<s>"]
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", bos)])
    j["post_processor"] = json.loads(tok.to_str())["post_processor"]
    return j


def write_variant(name, j, texts, manifest, base=None, keys=("pre_tokenizer",)):
    """Writes NAME.json (or, with base, only the keys that replace base's) and
    NAME.expected.json. To stay small, a case's "ids" (with special tokens) is left out when it
    equals "special_prefix" + "ids_plain", "decoded" (of "ids") when it equals "text",
    "decoded_skip" when it equals "decoded"."""
    tok = Tokenizer.from_str(json.dumps(j))
    head = {"tokenizer": name + ".json"}
    if base is None:
        with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
    else:
        head = {"tokenizer": base + ".json", "override": {k: j[k] for k in keys}}
    # the post-processor's prefix (what add_special_tokens puts before the text's ids)
    prefix = tok.encode("", add_special_tokens=True).ids
    head["special_prefix"] = prefix
    out = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=True).ids
        plain = tok.encode(t, add_special_tokens=False).ids
        dec = tok.decode(ids, skip_special_tokens=False)
        skip = tok.decode(ids, skip_special_tokens=True)
        c = {"text": t, "ids_plain": plain}
        if ids != prefix + plain:
            c["ids"] = ids
        if dec != t:
            c["decoded"] = dec
        if skip != dec:
            c["decoded_skip"] = skip
        out.append(c)
    head["cases"] = out
    with open(os.path.join(OUT, name + ".expected.json"), "w", encoding="utf-8") as f:
        json.dump(head, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    manifest.append(name)


def main():
    lines = corpus_lines()
    texts = cases(lines)
    manifest = []
    bl = train_bytelevel(lines)
    write_variant("bpe_llama3", bl, texts, manifest)

    g = json.loads(json.dumps(bl))
    g["model"]["ignore_merges"] = False
    g["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                          "use_regex": True}
    g["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True}
    write_variant("bpe_gpt2", g, texts, manifest)

    s = json.loads(json.dumps(bl))
    s["model"]["ignore_merges"] = False
    s["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    s["post_processor"] = None
    write_variant("bpe_smollm", s, texts, manifest)

    sp = train_sp(lines)
    write_variant("sp_llama2", sp, texts, manifest)

    m = json.loads(json.dumps(sp))
    m["normalizer"] = None
    m["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                          "split": False}
    m["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                    "split": False}
    write_variant("sp_metaspace", m, texts, manifest)

    few = lines[:4] + lines[20:24] + lines[32:34]
    for behavior in ("removed", "isolated", "merged_with_previous", "merged_with_next",
                     "contiguous"):
        for invert in (False, True):
            v = json.loads(json.dumps(bl))
            pat = {"Regex": r"\s+|[0-9]"} if not invert else {"String": " "}
            v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": pat, "behavior": behavior_json(behavior), "invert": invert},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": False}]}
            write_variant("split_%s%s" % (behavior, "_inv" if invert else ""), v, few, manifest,
                          base="bpe_llama3")

    # Qwen2: NFC, the Qwen2 regex (single digits) + ByteLevel, on the llama3 model
    q = json.loads(json.dumps(bl))
    q["normalizer"] = {"type": "NFC"}
    q["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = LLAMA3_RE.replace(
        r"\p{N}{1,3}", r"\p{N}")
    write_variant("bpe_qwen2", q, texts, manifest, base="bpe_llama3",
                  keys=("normalizer", "pre_tokenizer"))

    uni = lines[:4] + [lines[19], lines[38], lines[40], lines[42], lines[43]]
    for form in ("NFD", "NFKC", "NFKD"):
        v = json.loads(json.dumps(bl))
        v["normalizer"] = {"type": form}
        write_variant("norm_" + form.lower(), v, uni, manifest, base="bpe_llama3",
                      keys=("normalizer",))
    r = json.loads(json.dumps(sp))
    r["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    r["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"Regex": "\u2581+"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1,
                                                     "stop": 1}]}
    write_variant("sp_regex_replace", r, few + [lines[19]], manifest, base="sp_llama2",
                  keys=("normalizer", "decoder"))

    with open(os.path.join(OUT, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print("wrote %d variants, %d bytes in %s" % (len(manifest), total, OUT))


def behavior_json(b):
    return {"removed": "Removed", "isolated": "Isolated", "merged_with_previous": "MergedWithPrevious",
            "merged_with_next": "MergedWithNext", "contiguous": "Contiguous"}[b]


if __name__ == "__main__":
    sys.exit(main())
