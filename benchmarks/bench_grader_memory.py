"""Peak memory of the grader process when the candidate sends it too much.

Grades the mha_interview solution as it is and with one hostile change at a time, each in
a fresh process, REPEAT times, and prints the median peak RSS of the grader process itself
(the kernel is a separate process, under its own memory limit) and the median wall time:

- a cell that prints SIZE MB;
- a cell that displays SIZE MB of HTML three times, past the kernel's own cap (it clears
  the display hooks the shim installs), so only the grader's message bound stops it;
- a forward that returns a stride-0 view claiming 8 GiB (a few bytes of storage);
- the same view sent past the shim's encoder (the notebook replaces it), so only the wire's
  bound stops it (in the kernel, and the grader's own bound on answers after it).

    .venv/bin/python benchmarks/bench_grader_memory.py [--megabytes 100] [--repeat 3]
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
    "from grader.run.pipeline import grade_notebook\n"
    "t = time.perf_counter()\n"
    "report = grade_notebook(sys.argv[1])\n"
    "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n"
)
RETURN = "        return y, (weights.mean(dim=1) if need_weights else None)\n"


def run(notebook: Path) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", MEASURE, str(notebook)],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, peak = out.stdout.split()[:2]
    return float(seconds), float(peak)


def variants(megabytes: int) -> dict[str, nbformat.NotebookNode]:
    def solution() -> nbformat.NotebookNode:
        return nbformat.read(ROOT / "solutions" / "mha_interview.ipynb", as_version=4)

    printed, displayed, view, forged = solution(), solution(), solution(), solution()
    printed.cells.append(nbformat.v4.new_code_cell(f"print('x' * {megabytes} * 1_000_000)"))
    displayed.cells.append(
        nbformat.v4.new_code_cell(
            "from IPython.display import HTML, display\n"
            "get_ipython().display_pub._hooks.clear()\n"
            f"for _ in range(3):\n    display(HTML('x' * {megabytes} * 1_000_000))"
        )
    )
    [cell] = [c for c in view.cells if RETURN in c.source]
    cell.source = cell.source.replace(RETURN, "        return torch.zeros(1).expand(2**31), None\n")
    forged.cells.append(
        nbformat.v4.new_code_cell(
            "import sys, torch\n"
            "shim = next(m for n, m in sys.modules.items() if n.startswith('_grader_shim'))\n"
            "shim._encode = lambda value, depth=0: torch.zeros(1).expand(2**31)"
        )
    )
    return {
        "solution": solution(),
        f"+ {megabytes} MB printed": printed,
        f"+ 3 x {megabytes} MB displayed": displayed,
        "forward returns 8 GiB view": view,
        "8 GiB view past the shim": forged,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'notebook':30} {'median s':>9} {'median grader peak MiB':>24}")
    with tempfile.TemporaryDirectory() as folder:
        for name, notebook in variants(args.megabytes).items():
            path = Path(folder) / "notebook.ipynb"
            nbformat.write(notebook, path)
            samples = [run(path) for _ in range(args.repeat)]
            print(
                f"{name:30} {statistics.median(s for s, _ in samples):>9.2f} "
                f"{statistics.median(m for _, m in samples):>24.0f}"
            )


if __name__ == "__main__":
    main()
