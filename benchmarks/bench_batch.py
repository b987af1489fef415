"""A batch of notebooks: `grade FOLDER -j 1` against `grade FOLDER -j 2` (the speed-up of a
second worker), and the cost per notebook inside a batch against `jupyter execute` of
each notebook alone.

The folder holds COUNT copies of the reference solutions, taken in turn (full marks: the
whole suite runs for each). Each command runs REPEAT times in a fresh process, alternating
the order, after one warm-up of each; the table shows medians of wall and CPU time (CPU
counted as in bench_grade.py: every process, kernels included). `jupyter execute` runs
once per distinct notebook per repeat; its per-notebook figure is the mean over the
batch's notebooks of each one's median.

    .venv/bin/python benchmarks/bench_batch.py [--count 16] [--repeat 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grade import ROOT, cgroup_works, measure  # noqa: E402  (a script beside this one)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=16, help="notebooks in the batch")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bin", type=Path, default=Path(sys.executable).parent)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    bin_dir = args.bin.absolute()
    solutions = sorted((ROOT / "solutions").glob("*.ipynb"))
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "cohort"
        folder.mkdir()
        batch = [solutions[k % len(solutions)] for k in range(args.count)]
        for k, source in enumerate(batch):
            shutil.copy(source, folder / f"{k:03}-{source.name}")
        singles = {}
        for source in solutions:
            copy = Path(scratch) / source.name
            shutil.copy(source, copy)
            singles[source] = [str(bin_dir / "jupyter"), "execute", "--allow-errors", str(copy)]
        commands = {
            f"-j{jobs}": [str(bin_dir / "grade"), str(folder), "-j", str(jobs), "--json"]
            for jobs in (1, 2)
        }
        for command in [*commands.values(), *singles.values()]:
            measure(command)  # warm-up: page cache, bytecode
        runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in commands}
        alone: dict[Path, list[tuple[float, float, float]]] = {s: [] for s in solutions}
        for i in range(args.repeat):
            order = list(commands) if i % 2 == 0 else list(reversed(commands))
            for name in order:
                runs[name].append(measure(commands[name]))
            for source, command in singles.items():
                alone[source].append(measure(command))
    wall = {name: statistics.median(w for w, _, _ in samples) for name, samples in runs.items()}
    cpu = {name: statistics.median(c for _, c, _ in samples) for name, samples in runs.items()}
    jupyter_wall = statistics.mean(statistics.median(w for w, _, _ in alone[s]) for s in batch)
    jupyter_cpu = statistics.mean(statistics.median(c for _, c, _ in alone[s]) for s in batch)
    counted = "a cgroup per command" if cgroup_works() else "getrusage"
    print(f"{args.count} notebooks, {os.cpu_count()} CPUs, CPU counted in {counted}")
    print(f"{'':28} {'wall s':>8} {'CPU s':>8} {'per notebook s':>15} {'x jupyter':>10}")
    figures: dict = {"count": args.count, "repeat": args.repeat}
    for name in commands:
        per = wall[name] / args.count
        print(
            f"{'grade ' + name:28} {wall[name]:>8.2f} {cpu[name]:>8.2f} {per:>15.2f} "
            f"{per / jupyter_wall:>10.2f}"
        )
        figures[name] = {
            "wall_s": round(wall[name], 2),
            "cpu_s": round(cpu[name], 2),
            "per_notebook_s": round(per, 3),
            "per_notebook_x_jupyter": round(per / jupyter_wall, 2),
        }
    print(f"{'jupyter execute (each alone)':28} {'':>8} {jupyter_cpu:>8.2f} {jupyter_wall:>15.2f}")
    speedup = wall["-j1"] / wall["-j2"]
    print(f"speed-up of -j 2 over -j 1: {speedup:.2f}x")
    figures["jupyter_per_notebook_s"] = round(jupyter_wall, 3)
    figures["jupyter_cpu_per_notebook_s"] = round(jupyter_cpu, 3)
    figures["speedup_j2_over_j1"] = round(speedup, 2)
    figures["when"] = time.strftime("%Y-%m-%d %H:%M")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
