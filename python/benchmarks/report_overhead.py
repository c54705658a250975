"""What a metrics report costs: drover's Context.report against the hand-written line it replaces.

    python python/benchmarks/report_overhead.py [N]

Both write to /dev/null, so the figures are the library's own cost (checks, JSON, one write), not
the pipe's. The peer is what the shipped example did before the library: print(json.dumps(...),
flush=True). Prints microseconds per report for each and the ratio.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
from drover.context import Context  # noqa: E402


def best_of(rounds, n, fn):
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for step in range(n):
            fn(step)
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    null = os.open(os.devnull, os.O_WRONLY)
    ctx = Context(env={"DROVER_JOB_ID": "bench", "DROVER_CHECKPOINT_DIR": "/tmp/drover-bench"},
                  install_signal_handlers=False, stdout_fd=null)
    out = open(os.devnull, "w")

    def library(step):
        ctx.report(step, loss=0.123456, accuracy=0.987654)

    def by_hand(step):
        print(json.dumps({"drover": "metrics", "step": step,
                          "values": {"loss": 0.123456, "accuracy": 0.987654}}), file=out, flush=True)

    lib = best_of(5, n, library)
    hand = best_of(5, n, by_hand)
    print("report: drover %.2f us, by hand (print(json.dumps), flush) %.2f us; drover/by-hand %.2fx"
          % (lib, hand, lib / hand))


if __name__ == "__main__":
    main()
