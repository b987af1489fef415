"""Wall time, CPU time and peak memory of `grade NOTEBOOK` (sandboxed, the default where
bubblewrap works) against `jupyter execute NOTEBOOK`, both from the same environment; what
the sandbox costs (`grade --no-sandbox` in the same rounds); and the time of `grade list`.

For each notebook the three commands run in rounds, rotating which goes first, REPEAT times
(after one warm-up of each), each in a fresh process. The table shows medians: wall and
CPU (user + system of the command and every process it started, the kernel included:
counted in a cgroup of its own where one can be made, else with getrusage, which misses
a kernel in bubblewrap's PID namespace),
their ratios (grade / jupyter), the grader's own overhead (the median of the paired
differences of wall time: what grading adds to running the notebook), the sandbox's cost
(the median of the paired differences of wall time between `grade` and `grade
--no-sandbox`, and its share of `grade`'s wall time), and peak memory (the largest resident
set among the command's processes).

    .venv/bin/python benchmarks/bench_grade.py [NOTEBOOK ...] [--repeat 5] [--bin DIR] [--json PATH]

`--bin DIR` takes `grade` and `jupyter` from DIR (another environment's bin/; by default
this interpreter's). `benchmarks/extras_env.sh` builds an environment that also holds
jupyter-server (and with it jsonschema's format-checker extras, as JupyterLab or nbgrader
bring them): run the benchmark again with `--bin benchmarks/.venv-extras/bin`.
"""

from __future__ import annotations

import argparse
import contextlib
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
# Runs the command (argv[2:]) and prints wall, CPU, peak RSS and exit code. CPU comes from a
# cgroup of its own (argv[1], "" for none) where one can be made: it counts every process,
# a kernel in bubblewrap's PID namespace too, which getrusage misses (bubblewrap's
# namespace is torn down, not waited for).
MEASURE = (
    "import os, resource, subprocess, sys, time\n"
    "group, usage = sys.argv[1].split(',') if sys.argv[1] else ('', '')\n"
    "enter = lambda: open(os.path.join(group, 'cgroup.procs'), 'w').write(str(os.getpid()))\n"
    "t = time.perf_counter()\n"
    "done = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,\n"
    "                      preexec_fn=enter if group else None)\n"
    "wall = time.perf_counter() - t\n"
    "use = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "cpu = use.ru_utime + use.ru_stime\n"
    "if group:\n"
    "    text = open(os.path.join(group, usage)).read()\n"
    "    cpu = int(text) / 1e9 if usage == 'cpuacct.usage' else int(text.split()[1]) / 1e6\n"
    "print(wall, cpu, use.ru_maxrss / 1024, done.returncode)\n"
)


def cgroup() -> str:
    """'folder,usage file' of a fresh cgroup to count a command's CPU in, or ''."""
    for parent, usage in (
        ("/sys/fs/cgroup/cpuacct", "cpuacct.usage"),  # cgroup v1
        ("/sys/fs/cgroup/unified", "cpu.stat"),  # cgroup v2 beside v1
        ("/sys/fs/cgroup", "cpu.stat"),  # cgroup v2
    ):
        folder = Path(parent) / f"bench-grade-{os.getpid()}-{time.monotonic_ns()}"
        try:
            folder.mkdir()
        except OSError:
            continue
        if (folder / usage).exists() and os.access(folder / "cgroup.procs", os.W_OK):
            return f"{folder},{usage}"
        folder.rmdir()
    return ""


def measure(command: list[str], ok: tuple[str, ...] = ("0", "1")) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MiB) of one run of `command`."""
    group = cgroup()
    try:
        out = subprocess.run(
            [sys.executable, "-c", MEASURE, group, *command],
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        if group:
            with contextlib.suppress(OSError):
                Path(group.split(",")[0]).rmdir()
    wall, cpu, peak, returncode = out.stdout.split()
    if returncode not in ok:
        raise SystemExit(f"{' '.join(command)} exited {returncode}")
    return float(wall), float(cpu), float(peak)


def bench(notebook: Path, repeat: int, bin_dir: Path) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / notebook.name  # jupyter execute may write next to the notebook
        shutil.copy(notebook, copy)
        commands = {
            "grade": [str(bin_dir / "grade"), str(notebook), "--json"],
            "unsandboxed": [str(bin_dir / "grade"), str(notebook), "--json", "--no-sandbox"],
            "jupyter": [str(bin_dir / "jupyter"), "execute", "--allow-errors", str(copy)],
        }
        for command in commands.values():
            measure(command)  # warm-up: page cache, bytecode
        runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in commands}
        names = list(commands)
        for i in range(repeat):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                runs[name].append(measure(commands[name]))
    row: dict = {"notebook": _name(notebook), "repeat": repeat}
    for name, samples in runs.items():
        row[name] = {
            "wall_s": round(statistics.median(w for w, _, _ in samples), 3),
            "cpu_s": round(statistics.median(c for _, c, _ in samples), 3),
            "min_wall_s": round(min(w for w, _, _ in samples), 3),
            "max_wall_s": round(max(w for w, _, _ in samples), 3),
            "peak_mib": round(statistics.median(m for _, _, m in samples), 1),
        }
    g, j = row["grade"], row["jupyter"]
    row["wall_ratio"] = round(g["wall_s"] / j["wall_s"], 2)
    row["cpu_ratio"] = round(g["cpu_s"] / j["cpu_s"], 2)
    pairs = zip(runs["grade"], runs["jupyter"], strict=True)
    row["overhead_s"] = round(statistics.median(a[0] - b[0] for a, b in pairs), 3)
    pairs = zip(runs["grade"], runs["unsandboxed"], strict=True)
    row["sandbox_s"] = round(statistics.median(a[0] - b[0] for a, b in pairs), 3)
    row["sandbox_share"] = round(row["sandbox_s"] / g["wall_s"], 3)
    return row


def bench_list(repeat: int, bin_dir: Path) -> dict:
    """`grade list` (it loads no torch)."""
    command = [str(bin_dir / "grade"), "list"]
    measure(command, ok=("0",))
    samples = [measure(command, ok=("0",)) for _ in range(repeat)]
    return {
        "wall_s": round(statistics.median(w for w, _, _ in samples), 3),
        "cpu_s": round(statistics.median(c for _, c, _ in samples), 3),
    }


def cgroup_works() -> bool:
    group = cgroup()
    if group:
        Path(group.split(",")[0]).rmdir()
    return bool(group)


def _name(notebook: Path) -> str:
    return str(notebook.relative_to(ROOT)) if notebook.is_relative_to(ROOT) else str(notebook)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "notebooks", nargs="*", type=Path, help="default: every notebook in solutions/"
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--bin", type=Path, default=Path(sys.executable).parent)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    bin_dir = args.bin.absolute()
    notebooks = [n.resolve() for n in args.notebooks] or sorted(
        (ROOT / "solutions").glob("*.ipynb")
    )
    counted = "a cgroup per command" if cgroup_works() else "getrusage (no cgroup could be made)"
    print(f"environment: {bin_dir.parent}; CPU counted in {counted}")
    print(
        f"{'notebook':32} {'grade s':>8} {'jupyter s':>9} {'wall x':>7} {'grade cpu':>9} "
        f"{'jupyter cpu':>11} {'cpu x':>6} {'overhead s':>10} {'sandbox s':>9} {'share':>6} "
        f"{'grade MiB':>9} {'jupyter MiB':>11}"
    )
    rows = []
    for notebook in notebooks:
        row = bench(notebook, args.repeat, bin_dir)
        rows.append(row)
        g, j = row["grade"], row["jupyter"]
        print(
            f"{row['notebook']:32} {g['wall_s']:>8.2f} {j['wall_s']:>9.2f} "
            f"{row['wall_ratio']:>7.2f} {g['cpu_s']:>9.2f} {j['cpu_s']:>11.2f} "
            f"{row['cpu_ratio']:>6.2f} {row['overhead_s']:>10.2f} {row['sandbox_s']:>9.2f} "
            f"{row['sandbox_share']:>6.1%} {g['peak_mib']:>9.0f} {j['peak_mib']:>11.0f}"
        )
    listing = bench_list(args.repeat, bin_dir)
    print(f"grade list: {listing['wall_s']:.2f} s wall, {listing['cpu_s']:.2f} s CPU (median)")
    meta = {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "environment": str(bin_dir.parent),
        "cpu_counted_in": "a cgroup" if cgroup_works() else "getrusage of waited children",
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"machine": meta, "rows": rows, "grade_list": listing}
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
