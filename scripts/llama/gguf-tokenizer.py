#!/usr/bin/env python3
"""Write a Hugging Face tokenizer.json for the vocabulary embedded in a GGUF model
(byte-level BPE models only, `tokenizer.ggml.model == "gpt2"`, such as SmolLM2:
the Hugging Face `tokenizers` format of a BPE model with a ByteLevel pre-tokenizer), so
`tokenizer:` of tokenprobe's config can be tested offline against llama.cpp serving
that model. Standard library only; the test venv's python runs it:

    .venv/bin/python scripts/llama/gguf-tokenizer.py OUT.json [MODEL.gguf]

Without MODEL.gguf it uses the SmolLM2 GGUF of scripts/llama/llama-server.py.
The GGUF reader follows the format of llama.cpp's gguf-py (docs/gguf.md in
ggml-org/ggml): header, then typed key-value metadata.
"""

import json
import os
import struct
import subprocess
import sys

# GGUF metadata value types (ggml/docs/gguf.md).
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


def read_metadata(path, wanted):
    out = {}
    with open(path, "rb") as f:
        def unpack(fmt):
            size = struct.calcsize("<" + fmt)
            return struct.unpack("<" + fmt, f.read(size))[0]

        def string():
            n = unpack("Q")
            return f.read(n).decode("utf-8", errors="replace")

        def value(t):
            if t in SCALARS:
                return unpack(SCALARS[t])
            if t == STRING:
                return string()
            if t == ARRAY:
                et, n = unpack("I"), unpack("Q")
                return [value(et) for _ in range(n)]
            raise ValueError(f"unknown GGUF value type {t}")

        if f.read(4) != b"GGUF":
            sys.exit(f"gguf-tokenizer.py: {path} is not a GGUF file")
        version = unpack("I")
        if version < 2:
            sys.exit(f"gguf-tokenizer.py: GGUF version {version} is not supported")
        _tensors, kvs = unpack("Q"), unpack("Q")
        for _ in range(kvs):
            key = string()
            v = value(unpack("I"))
            if key in wanted:
                out[key] = v
            if len(out) == len(wanted):
                break
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_path = sys.argv[1]
    if len(sys.argv) > 2:
        model = sys.argv[2]
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        model = subprocess.check_output(
            [sys.executable, os.path.join(here, "llama-server.py"), "--print-model"], text=True
        ).strip()
    keys = ["tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.merges"]
    meta = read_metadata(model, set(keys))
    if meta.get("tokenizer.ggml.model") != "gpt2":
        sys.exit(f"gguf-tokenizer.py: {model}: not a byte-level BPE vocabulary ({meta.get('tokenizer.ggml.model')})")
    vocab = {tok: i for i, tok in enumerate(meta["tokenizer.ggml.tokens"])}
    merges = [m.split(" ", 1) for m in meta["tokenizer.ggml.merges"]]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": dict(byte_level, add_prefix_space=True),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    print(json.dumps({"tokenizer": out_path, "vocab": len(vocab), "merges": len(merges)}))


if __name__ == "__main__":
    main()
