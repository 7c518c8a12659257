#!/usr/bin/env python3
"""Writes a small Hugging Face tokenizer (byte-level BPE, trained here on generated text) to the
directory given, for load generators that insist on a tokenizer (GuideLLM, AIPerf, vllm-bench) on a
machine that cannot download one. Token counts it gives are its own; the comparison uses the
server's usage and timing, not these counts.

DIR/tokenizer.json (what vllm-bench reads) needs only the `tokenizers` package; the rest of a
Hugging Face tokenizer directory (what GuideLLM and AIPerf load, through `transformers`) is written
when `transformers` is installed.

    python make_tokenizer.py DIR
"""

import os
import random
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

WORDS = (
    "the a of to and in is it you that he was for on are with as his they be at one have this "
    "from or had by hot word but what some we can out other were all there when up use your how "
    "said an each she which do their time if will way about many then them write would like so "
    "these her long make thing see him two has look more day could go come did number sound no "
    "most people my over know water than call first who may down side been now find any new work "
    "part take get place made live where after back little only round man year came show every "
    "good me give our under name very through just form sentence great think say help low line"
).split()


def corpus(n: int):
    rng = random.Random(7)
    for _ in range(n):
        yield " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40))) + "."


def main() -> None:
    out = sys.argv[1]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(5000), trainer=trainer)
    os.makedirs(out, exist_ok=True)
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        tok.save(os.path.join(out, "tokenizer.json"))
        print(f"tokenizer.json written to {out} ({tok.get_vocab_size()} tokens; "
              "no transformers here: no tokenizer_config.json)")
        return
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    )
    fast.save_pretrained(out)
    print(f"tokenizer written to {out} ({len(fast)} tokens)")


if __name__ == "__main__":
    main()
