#!/usr/bin/env python3
"""What a late reader can still learn of when each packet arrived (Linux, loopback; stdlib only).

A sender writes three segments GAP ms apart (TCP_NODELAY, one write each); the receiver, which
asks the kernel to stamp what it receives (SO_TIMESTAMPNS), reads only after all three are
queued. It then asks three ways for the first segment's arrival: a 1-byte MSG_PEEK, a read of
the first segment's bytes alone, and the read of the rest. If the kernel kept each segment's
stamp, the first two would give the first segment's instant. Linux merges a segment that waits
unread into the one queued before it (`tcp_try_coalesce`) and gives the merged buffer the newer
segment's stamp, so all three give the last one's: the first segment's instant is gone before any
read is made, whatever the reader asks for. A reader that reads each segment before the next
arrives gets each one's own stamp (the control row).

This is why a prober that falls one inter-token gap behind the stream cannot recover its first
token's instant (docs/exactness.md, "The tail at 1,000 streams").

    python3 scripts/bench/coalesce.py              # GAP 1, 5 and 10 ms, 20 trials each
"""

import socket
import struct
import sys
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SEGMENT = 100
TRIALS = 20


def stamp(ancillary):
    for _level, kind, data in ancillary:
        if kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            return sec + nsec / 1e9
    return None


def pair():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    tx = socket.socket()
    tx.connect(srv.getsockname())
    rx, _ = srv.accept()
    srv.close()
    tx.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    return tx, rx


def late_reader(gap_s):
    """Stamps (ms after the first send) of a peek, a first-segment read and the rest, read late."""
    tx, rx = pair()
    sent = []
    for byte in b"ABC":
        tx.send(bytes([byte]) * SEGMENT)
        sent.append(time.time())
        time.sleep(gap_s)
    _, anc, _, _ = rx.recvmsg(1, 256, socket.MSG_PEEK)
    peek = stamp(anc)
    _, anc, _, _ = rx.recvmsg(SEGMENT, 256)
    first = stamp(anc)
    _, anc, _, _ = rx.recvmsg(4 * SEGMENT, 256)
    rest = stamp(anc)
    tx.close()
    rx.close()
    if None in (peek, first, rest):
        return None
    return [(x - sent[0]) * 1e3 for x in (sent[2], peek, first, rest)]


def on_time_reader(gap_s):
    """Stamps (ms after the first send) of each segment read before the next is sent."""
    tx, rx = pair()
    t0, got = None, []
    for byte in b"ABC":
        tx.send(bytes([byte]) * SEGMENT)
        t0 = t0 or time.time()
        _, anc, _, _ = rx.recvmsg(SEGMENT, 256)
        got.append(stamp(anc))
        time.sleep(gap_s)
    tx.close()
    rx.close()
    return None if None in got else [(x - t0) * 1e3 for x in got]


def main():
    if not sys.platform.startswith("linux"):
        print("coalesce.py: Linux only (SO_TIMESTAMPNS on TCP)", file=sys.stderr)
        return 2
    print("three segments GAP ms apart, stamps in ms after the first send (median of "
          f"{TRIALS} trials)")
    print("| GAP | reader | third sent | 1-byte peek | first segment's read | later reads "
          "| peeks stamped as the last segment |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for gap in (1, 5, 10):
        rows = [r for r in (late_reader(gap / 1e3) for _ in range(TRIALS)) if r]
        if not rows:
            print(f"| {gap} | late | the kernel gave no stamp | | | | |")
            continue
        med = [sorted(c)[len(c) // 2] for c in zip(*rows)]
        kept = sum(abs(r[1] - r[0]) < 0.5 * gap for r in rows)
        print(f"| {gap} | late | {med[0]:.3f} | {med[1]:.3f} | {med[2]:.3f} | {med[3]:.3f} | "
              f"{kept} of {len(rows)} |")
        rows = [r for r in (on_time_reader(gap / 1e3) for _ in range(TRIALS)) if r]
        if rows:
            med = [sorted(c)[len(c) // 2] for c in zip(*rows)]
            print(f"| {gap} | on time | {med[2]:.3f} (its read) | - | {med[0]:.3f} | "
                  f"{med[1]:.3f}, {med[2]:.3f} | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
