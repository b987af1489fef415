"""The cost of one call into the kernel over the call channel, measured in a real kernel.

A notebook defines `echo(x)` (returns its argument) and an nn.Linear; the suite's handle
(`grader.suite.handle.Kernel`) calls them N times, after 20 warm-up calls, and the table shows
the median time per call of each kind: a call with no tensor, a call with a [2, 5, 12]
float tensor in and out, a module's forward, and the same forward asked ten times in one
batched request (per call).

    .venv/bin/python benchmarks/bench_channel.py [--calls 500]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from grader.core.limits import Limits
from grader.kernel import Session
from grader.suite.handle import Kernel

NOTEBOOK = """
import torch
def echo(x):
    return x
layer = torch.nn.Linear(12, 12)
"""


def per_call(job: Callable[[], object], calls: int, per_job: int = 1) -> float:
    """Median microseconds per call of `job` (which makes `per_job` calls), in 10 blocks."""
    for _ in range(20):
        job()
    blocks = []
    for _ in range(10):
        started = time.perf_counter()
        for _ in range(max(1, calls // 10 // per_job)):
            job()
        blocks.append((time.perf_counter() - started) / (max(1, calls // 10 // per_job) * per_job))
    return statistics.median(blocks) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    x = torch.randn(2, 5, 12)
    with Session([(0, NOTEBOOK)], Limits()) as session:
        session.prepare()
        kernel = Kernel(session)
        echo, layer = kernel.get("echo"), kernel.get("layer")
        rows = {
            "call, no tensor": per_call(lambda: echo(1), args.calls),
            "call, [2, 5, 12] tensor in and out": per_call(lambda: echo(x), args.calls),
            "nn.Linear forward": per_call(lambda: layer(x), args.calls),
            "nn.Linear forward, 10 per request": per_call(
                lambda: kernel.many(layer, [((x,), {})] * 10), args.calls, per_job=10
            ),
        }
    print(f"{'call':40} {'us per call':>12}")
    for name, micros in rows.items():
        print(f"{name:40} {micros:>12.0f}")


if __name__ == "__main__":
    main()
