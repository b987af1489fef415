"""What the trust boundary costs: the sandbox per notebook in a batch, and the engine's
allow-list watch (guard.py's `_public_api_only`) per graded call.

1. A batch of COUNT copies of the reference solutions, `grade FOLDER --json -j 2` as it
   runs by default (the sandbox: bubblewrap, read-only /proc, the kernel's own uid as
   root, the system-call filter; and the allow-list watch) against the same batch with
   `--no-sandbox` and the allow-list's trace function never set (the shim's source patched
   in this benchmark's process only: there is no flag for it), and against `--no-sandbox`
   alone; alternating, REPEAT times each in a fresh process: medians of the wall time per
   notebook.
2. A graded call of the kind the suites make (a small attention module's forward, about 40
   torch calls from the notebook's code), timed in this process with the watch's profile
   function set as the shim sets it during a hidden test, against the same call without
   it: medians of CALLS calls, REPEAT rounds. (The torch function mode that also runs
   during a test is the exercise's, there before the allow-list: not counted here.)

    .venv/bin/python benchmarks/bench_trust.py [--count 14] [--repeat 3] [--calls 2000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


# Runs `grade` with the allow-list's trace function never set (see the docstring).
WITHOUT_WATCH = (
    "import sys; import grader.kernel.launch as launch\n"
    'on = \'_watch(_state["trace"] if _state["active"] else None)\'\n'
    "assert on in launch.SHIM_SOURCE\n"
    "launch.SHIM_SOURCE = launch.SHIM_SOURCE.replace(on, '_watch(None)')\n"
    "from grader.cli import main; sys.exit(main(sys.argv[1:]))"
)


def batch_seconds(folder: Path, *flags: str, watched: bool = True) -> float:
    started = time.perf_counter()
    command = ["-m", "grader.cli"] if watched else ["-c", WITHOUT_WATCH]
    done = subprocess.run(
        [sys.executable, *command, str(folder), "--json", "-j", "2", *flags],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    took = time.perf_counter() - started
    reports = json.loads(done.stdout)
    full = all(r.get("score") == r.get("max_score") for r in reports)
    if not full:
        raise SystemExit(f"a solution lost points ({' '.join(flags)}): {done.stderr[-500:]}")
    return took


CANDIDATE = """
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, d=32, h=4):
        super().__init__()
        self.h, self.qkv, self.out = h, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / (d // self.h) ** 0.5
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        scores = scores.masked_fill(mask, float("-inf"))
        weights = torch.exp(scores - scores.amax(-1, keepdim=True))
        weights = weights / weights.sum(-1, keepdim=True)
        return self.out((weights @ v).transpose(1, 2).reshape(b, t, d))
"""


def call_seconds(calls: int, repeat: int) -> tuple[float, float]:
    """Median seconds per call (without, with) the allow-list's trace function."""
    import torch

    from grader.kernel import guard

    folder = tempfile.mkdtemp(prefix="bench-trust-")
    path = Path(folder) / "candidate.py"
    path.write_text(CANDIDATE)
    namespace: dict = {}
    exec(compile(CANDIDATE, str(path), "exec"), namespace)
    module = namespace["Attention"]()
    x = torch.randn(2, 8, 32)
    state = {"active": True, "busy": False}
    seen: list[str] = []
    library = tuple(p + "/" for p in {sys.prefix, sys.base_prefix})
    trace, _, _ = guard._public_api_only(
        torch, lambda kind, message: seen.append(message), state, [], library
    )
    torch.set_num_threads(1)
    rounds: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeat):
        for watched in (False, True):
            sys.settrace(trace if watched else None)
            try:
                started = time.perf_counter()
                for _ in range(calls):
                    module(x)
                rounds[watched].append((time.perf_counter() - started) / calls)
            finally:
                sys.settrace(None)
    shutil.rmtree(folder)
    if seen:
        raise SystemExit(f"the honest call was flagged: {seen[:3]}")
    return statistics.median(rounds[False]), statistics.median(rounds[True])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=14, help="notebooks in the batch")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()

    bare, watched = call_seconds(args.calls, args.repeat)
    print(
        f"graded call (attention forward, ~40 torch calls): {bare * 1e6:.0f} us without the "
        f"allow-list watch, {watched * 1e6:.0f} us with it (+{(watched - bare) * 1e6:.0f} us, "
        f"x{watched / bare:.2f}); medians of {args.repeat} rounds of {args.calls} calls"
    )
    solutions = sorted((ROOT / "solutions").glob("*.ipynb"))
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for n in range(args.count):
            shutil.copy(solutions[n % len(solutions)], folder / f"n{n:03d}.ipynb")
        batch_seconds(folder)  # warm-up (the page cache, the template's first start)
        times: dict[str, list[float]] = {"default": [], "no-sandbox": [], "neither": []}
        for _ in range(args.repeat):
            times["default"].append(batch_seconds(folder))
            times["no-sandbox"].append(batch_seconds(folder, "--no-sandbox"))
            times["neither"].append(batch_seconds(folder, "--no-sandbox", watched=False))
    per = {k: statistics.median(v) / args.count for k, v in times.items()}
    print(
        f"batch of {args.count} solutions, -j 2, s per notebook (medians of {args.repeat} runs, "
        f"alternating): sandbox and allow-list {per['default']:.3f}; allow-list alone "
        f"{per['no-sandbox']:.3f}; neither {per['neither']:.3f}; the two together cost "
        f"{(per['default'] / per['neither'] - 1) * 100:+.1f}%"
    )


if __name__ == "__main__":
    main()
