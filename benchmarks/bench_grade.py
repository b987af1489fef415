"""Wall time and peak memory of `grade NOTEBOOK` against `jupyter execute NOTEBOOK`.

Each command runs REPEAT times in a fresh process (alternating, after one warm-up of each);
the table shows medians and the ratio of medians. Peak memory is the largest resident set
of the command's process tree as the kernel reports it (getrusage of waited children).

    .venv/bin/python benchmarks/bench_grade.py [NOTEBOOK ...] [--repeat 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def measure(command: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS in MiB of the command and its children)."""
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, done.returncode)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *command], capture_output=True, text=True, check=True
    )
    seconds, peak, returncode = out.stdout.split()
    if returncode not in ("0", "1"):
        raise SystemExit(f"{' '.join(command)} exited {returncode}")
    return float(seconds), float(peak)


def bench(notebook: Path, repeat: int) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / notebook.name  # jupyter execute may write next to the notebook
        shutil.copy(notebook, copy)
        commands = {
            "grade": [str(BIN / "grade"), str(notebook), "--json"],
            "jupyter execute": [str(BIN / "jupyter"), "execute", "--allow-errors", str(copy)],
        }
        for command in commands.values():
            measure(command)  # warm-up: page cache, bytecode
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(repeat):
            for name, command in commands.items():
                runs[name].append(measure(command))
    row = {
        "notebook": str(notebook.relative_to(ROOT))
        if notebook.is_relative_to(ROOT)
        else str(notebook),
        "repeat": repeat,
    }
    for name, samples in runs.items():
        row[name] = {
            "median_s": round(statistics.median(s for s, _ in samples), 3),
            "min_s": round(min(s for s, _ in samples), 3),
            "max_s": round(max(s for s, _ in samples), 3),
            "median_peak_mib": round(statistics.median(m for _, m in samples), 1),
        }
    row["ratio"] = round(row["grade"]["median_s"] / row["jupyter execute"]["median_s"], 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "notebooks", nargs="*", type=Path, help="default: every notebook in solutions/"
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    notebooks = [n.resolve() for n in args.notebooks] or sorted(
        (ROOT / "solutions").glob("*.ipynb")
    )
    rows = []
    print(
        f"{'notebook':36} {'grade (s)':>10} {'jupyter (s)':>12} {'ratio':>6} {'grade MiB':>10} {'jupyter MiB':>12}"
    )
    for notebook in notebooks:
        row = bench(notebook, args.repeat)
        rows.append(row)
        g, j = row["grade"], row["jupyter execute"]
        print(
            f"{row['notebook']:36} {g['median_s']:>10.2f} {j['median_s']:>12.2f} {row['ratio']:>6.2f} "
            f"{g['median_peak_mib']:>10.0f} {j['median_peak_mib']:>12.0f}"
        )
    meta = {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
