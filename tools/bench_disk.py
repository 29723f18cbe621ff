"""What the disk alone gives: synced LMDB commits of one 200-byte put each.

    python -m tools.bench_disk [--commits 10000] [--dir DIR]

The floor under every durable write's latency: the write-tail figures of
``python -m tools.bench_mcp --only-writes --writes 10000`` are read against
these, taken right after on the same disk.  Prints p50, p99, p99.9 and max in
ms, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import lmdb


def commits(path: str, n: int) -> list[float]:
    """Milliseconds of each of ``n`` synced commits, one 200-byte put each."""
    env = lmdb.open(path, map_size=1 << 30, sync=True, metasync=True)
    value = os.urandom(200)
    out = []
    try:
        for i in range(n):
            start = time.perf_counter()
            with env.begin(write=True) as txn:
                txn.put(i.to_bytes(8, "big"), value)
            out.append((time.perf_counter() - start) * 1000)
    finally:
        env.close()
    return out


def percentile(sorted_ms: list[float], p: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(p / 100 * len(sorted_ms)))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench_disk", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--commits", type=int, default=10_000, help="synced commits to time (default 10000)")
    p.add_argument("--dir", default=None, help="directory for the scratch store (default: a temp one)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        ms = sorted(commits(tmp, args.commits))
    record = {"benchmark": "bare_lmdb_commits", "commits": len(ms),
              **{f"p{k}_ms": round(percentile(ms, k), 2) for k in (50, 99, 99.9)}, "max_ms": round(ms[-1], 2)}
    print(f"{len(ms):,} synced commits: p50 {record['p50_ms']} ms, p99 {record['p99_ms']}, "
          f"p99.9 {record['p99.9_ms']}, max {record['max_ms']}")
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
