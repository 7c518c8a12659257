#!/usr/bin/env python3
"""Writes the three example traces of this directory (a seeded draw, so running it again gives
the same files): 40 requests of each format over about 20 s, small enough to replay against
`tokenprobe simulate` in seconds.

- mooncake.jsonl: four conversations whose requests share their leading hash ids (a system
  prompt of two 512-token blocks, then the conversation's history), as Mooncake's traces do.
- azure.csv: the Azure LLM inference trace's columns (TIMESTAMP, ContextTokens,
  GeneratedTokens), its timestamps written as that trace writes them.
- burstgpt.csv: BurstGPT's columns, two models, a few requests that failed when recorded
  (0 response tokens).
- sessions.jsonl: six agent sessions in the Mooncake JSONL rows with AIPerf's session fields
  (`session_id`, `delay`): each first turn the whole prompt (a shared system prompt of two
  512-token blocks, then the session's own), each later turn its new input only, sent `delay` ms
  after the previous answer (or at a `timestamp` of its own).
"""
import random
import sys
from datetime import datetime, timedelta
from pathlib import Path

# Where to write them: this directory, or the one given (a test compares the two).
HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
N = 40
rng = random.Random(20261202)


def instants():
    t, out = 0.0, []
    for _ in range(N):
        out.append(t)
        t += rng.expovariate(2.0)  # about 2 requests/s
    return out


def mooncake():
    lines, next_id = [], 2
    history = {c: [0, 1] for c in range(4)}  # every conversation starts with the system prompt
    for t in instants():
        c = rng.randrange(4)
        ids = history[c]
        own = rng.randint(1, 2)
        ids = ids + list(range(next_id, next_id + own))
        next_id += own
        history[c] = ids
        input_length = 512 * (len(ids) - 1) + rng.randint(64, 511)
        lines.append(
            '{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%s]}'
            % (round(t * 1000), input_length, rng.randint(8, 48), ", ".join(map(str, ids)))
        )
    (HERE / "mooncake.jsonl").write_text("\n".join(lines) + "\n")


def azure():
    start = datetime(2023, 11, 16, 18, 15, 46)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t in instants():
        stamp = (start + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
        rows.append(f"{stamp},{rng.randint(80, 1800)},{rng.randint(4, 64)}")
    (HERE / "azure.csv").write_text("\n".join(rows) + "\n")


def burstgpt():
    rows = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    for t in instants():
        model = "ChatGPT" if rng.random() < 0.7 else "GPT-4"
        req = rng.randint(20, 1500)
        resp = 0 if rng.random() < 0.08 else rng.randint(4, 64)
        kind = "Conversation log" if rng.random() < 0.6 else "API log"
        rows.append(f"{round(5 + t)},{model},{req},{resp},{req + resp},{kind}")
    (HERE / "burstgpt.csv").write_text("\n".join(rows) + "\n")


def sessions():
    lines, next_id = [], 2
    for s in range(6):
        sid = f"agent-{s}"
        start = round(s * 1500 + rng.randint(0, 400))
        own = rng.randint(1, 2)
        ids = [0, 1] + list(range(next_id, next_id + own))
        next_id += own
        lines.append(
            '{"session_id": "%s", "timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%s]}'
            % (sid, start, 512 * (len(ids) - 1) + rng.randint(64, 511), rng.randint(8, 32),
               ", ".join(map(str, ids)))
        )
        at = start
        for turn in range(rng.randint(1, 4)):
            if turn == 2:
                # A turn recorded at its own instant instead of after a delay.
                at += rng.randint(3000, 6000)
                lines.append(
                    '{"session_id": "%s", "timestamp": %d, "input_length": %d, "output_length": %d}'
                    % (sid, at, rng.randint(40, 400), rng.randint(8, 32))
                )
            else:
                lines.append(
                    '{"session_id": "%s", "delay": %d, "input_length": %d, "output_length": %d}'
                    % (sid, rng.randint(200, 1500), rng.randint(40, 400), rng.randint(8, 32))
                )
    (HERE / "sessions.jsonl").write_text("\n".join(lines) + "\n")


mooncake()
azure()
burstgpt()
sessions()
