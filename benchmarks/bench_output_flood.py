"""Peak memory of the grader when the candidate floods its output.

Grades the mha_interview solution as it is, and with an extra cell that prints SIZE MB,
each in a fresh process, REPEAT times, and prints the median peak RSS of the grader
process itself (the kernel is a separate process) and the median wall time.

    .venv/bin/python benchmarks/bench_output_flood.py [--megabytes 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
MEASURE = (
    "import resource, sys, time\n"
    "from grader.grade import grade_notebook\n"
    "t = time.perf_counter()\n"
    "report = grade_notebook(sys.argv[1])\n"
    "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,\n"
    "      sum(c.output_cut for c in report.cell_errors) or report.notes)\n"
)


def run(notebook: Path) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", MEASURE, str(notebook)],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, peak = out.stdout.split()[:2]
    return float(seconds), float(peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    solution = nbformat.read(ROOT / "solutions" / "mha_interview.ipynb", as_version=4)
    with tempfile.TemporaryDirectory() as folder:
        plain = Path(folder) / "plain.ipynb"
        nbformat.write(solution, plain)
        flood = Path(folder) / "flood.ipynb"
        solution.cells.append(
            nbformat.v4.new_code_cell(f"print('x' * {args.megabytes} * 1_000_000)")
        )
        nbformat.write(solution, flood)
        print(f"{'notebook':24} {'median s':>9} {'median grader peak MiB':>24}")
        for name, path in (("solution", plain), (f"+ {args.megabytes} MB printed", flood)):
            samples = [run(path) for _ in range(args.repeat)]
            print(
                f"{name:24} {statistics.median(s for s, _ in samples):>9.2f} "
                f"{statistics.median(m for _, m in samples):>24.0f}"
            )


if __name__ == "__main__":
    main()
