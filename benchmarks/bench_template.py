"""Kernels forked from the warm template against cold ones, for solutions/mha_interview.ipynb:
one grading, a batch, and a re-grade under `grade --watch`, side by side with `jupyter
execute` of the same notebook.

In rounds that rotate which goes first (after one warm-up each of `jupyter execute`,
`grade` and `grade --cold`), each of these runs REPEAT times, each in a fresh process:

- `jupyter execute NB` (the baseline; NB is a copy of the notebook in a scratch folder);
- `grade NB` (the default: the template is started by this same command, so this is a
  first grading) and `grade --cold NB` (a fresh interpreter per kernel);
- `grade DIR -j 1` and `-j 2`, each with and without `--cold`, DIR holding COUNT copies.

Then one `grade --watch` process and one `grade --watch --cold` process (stdout a pipe,
each on its own copy) grade their copy once; the copy is rewritten (same bytes, new
mtime) REPEAT times, each after the previous re-grade has settled, alternating between
the two, and each re-grade's wall time runs from the end of the write to its status line
`watching NB: grading N took X.XX s; ...`. Last, each gets SIGINT (its process group, as
Ctrl-C would), which should end it with exit code 130. `grade --watch` starts the next
grading's kernel right after each grading, so a re-grade's wall time holds no kernel boot,
cold or forked; its CPU, counted over the whole cycle, does.

The table gives medians. CPU is user + system of every process a command started, the
kernels included wherever they are re-parented: each command runs in a cgroup of its own
(cgroup v2, else v1's cpuacct), whose count is read when it ends; for a re-grade, the
watch process's group from the write until the CPU settles (the whole cycle). Where no
cgroup can be made, CPU falls back to getrusage of the waited children (which misses
kernels re-parented away) and the output says so. getrusage's figure is kept beside the
cgroup's either way, to show what it misses.

    .venv/bin/python benchmarks/bench_template.py [--repeat 5] [--count 16] [--quick]
        [--bin DIR] [--json PATH]

`--quick`: a smoke run (1 round, a batch of 4, no warm-ups, 2 re-grades under watch).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cgroup_cpu import Counting, run_counted  # noqa: E402  (a module beside this script)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "solutions" / "mha_interview.ipynb"
STATUS = re.compile(r"watching .*: grading (\d+) took ([\d.]+) s")
SCORE = re.compile(r"^Score (\d+)/(\d+)")  # the card's score line, above the status line
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
WAIT_S = 300.0  # the longest wait for one grading's status line under watch
SETTLE_S = 0.5  # a cycle is over when its group used under 2% of a CPU for this long


@dataclass
class Run:
    """One run of a command: wall and CPU seconds (the cgroup's count where there is one,
    else getrusage's), getrusage's own CPU seconds, processes it left behind, and the
    results it gave below full marks."""

    wall_s: float
    cpu_s: float
    rusage_cpu_s: float
    leftovers: int = 0
    short: list[str] = field(default_factory=list)  # results below full marks


def measure(command: list[str], counting: Counting) -> Run:
    """One run of `command` in a fresh process. Exits the benchmark if it fails (exit 2 or
    more from `grade`, not 0 from `jupyter`); a `grade --json` that lost points (exit 1;
    the solution should get full marks) is counted and kept, and the output says so."""
    done = run_counted(command, counting)
    graded = "--json" in command
    if done.returncode not in ((0, 1) if graded else (0,)):
        tail = done.stderr.decode(errors="replace")[-2000:]
        raise SystemExit(f"{shlex.join(command)} exited {done.returncode}:\n{tail}")
    short = _short_of_full_marks(done.stdout) if graded else []
    for line in done.leftovers:
        print(f"  left running after it ended (killed): {line}", file=sys.stderr)
    for line in short:
        print(f"  not full marks: {line}", file=sys.stderr)
    return Run(done.wall_s, done.cpu_s, done.rusage_cpu_s, len(done.leftovers), short)


def _short_of_full_marks(stdout: bytes) -> list[str]:
    """'NOTEBOOK: SCORE/MAX (first headline)' for each result below full marks."""
    try:
        found = json.loads(stdout)
    except ValueError:
        return ["(no JSON on stdout)"]
    short = []
    for result in found if isinstance(found, list) else [found]:
        if result.get("error") or result.get("score") != result.get("max_score"):
            failed = [t["message"] for t in result.get("tests", []) if t["status"] != "passed"]
            why = result.get("error") or "; ".join(
                (result.get("headlines") or result.get("notes") or []) + failed[:1]
            )
            name = Path(result.get("notebook", "?")).name
            short.append(f"{name}: {result.get('score')}/{result.get('max_score')} {why}".strip())
    return short


class WatchError(Exception):
    """A watch process did not behave as its contract says."""


class Watcher:
    """One `grade --watch COPY` process, stdout a pipe, in a cgroup and process group of
    its own; reads its status lines without threads (so preexec_fn stays safe)."""

    def __init__(self, command: list[str], notebook: Path, counting: Counting) -> None:
        self.command, self.notebook = command, notebook
        self.group = counting.group()
        self.err = tempfile.TemporaryFile()  # noqa: SIM115  (closed by close())
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.err,
            preexec_fn=self.group.enter if self.group else None,
            start_new_session=True,
        )
        self._pending = b""
        self.score = "?"  # the last card's score, "53/53"

    def wait_for(self, n: int) -> tuple[float, float]:
        """(when it arrived, the seconds it reports) of the status line of grading `n`."""
        deadline = time.monotonic() + WAIT_S
        while True:
            line, when = self._line(deadline)
            if line is None:
                code = self.proc.wait()
                raise WatchError(f"it ended (exit {code}) before grading {n}: {self._err()}")
            line = ANSI.sub("", line)
            if score := SCORE.match(line.strip()):
                self.score = f"{score[1]}/{score[2]}"
            found = STATUS.search(line)
            if found and int(found[1]) == n:
                return when, float(found[2])
            if found and int(found[1]) > n:
                raise WatchError(f"grading {found[1]} came where grading {n} was expected")

    def regrade(self, n: int) -> dict:
        """Rewrite the notebook (same bytes, new mtime); the wall time from the end of the
        write to grading `n`'s status line, the time it reports, the cycle's CPU."""
        before = self.group.cpu_s() if self.group else 0.0
        content, previous = self.notebook.read_bytes(), self.notebook.stat().st_mtime_ns
        self.notebook.write_bytes(content)
        if self.notebook.stat().st_mtime_ns <= previous:  # a coarse clock: still a new mtime
            os.utime(self.notebook, ns=(previous + 1_000_000,) * 2)
        written = time.perf_counter()
        arrived, reported = self.wait_for(n)
        self.settle()
        return {
            "wall_s": arrived - written,
            "reported_s": reported,
            "cpu_s": self.group.cpu_s() - before if self.group else None,
            "score": self.score,
        }

    def settle(self) -> None:
        """Wait until the group's CPU stops growing (the template re-warmed, kernels gone);
        without a cgroup, wait 2 s."""
        if self.group is None:
            time.sleep(2.0)
            return
        deadline, last, since = time.monotonic() + 30.0, self.group.cpu_s(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = self.group.cpu_s()
            if now - last > 0.02 * SETTLE_S:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= SETTLE_S:
                return

    def interrupt(self) -> int | None:
        """SIGINT to its process group, as Ctrl-C; its exit code (None: still running
        after 60 s, then killed)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self) -> list[str]:
        if self.proc.poll() is None:
            self.kill()
        self.proc.stdout.close()  # type: ignore[union-attr]
        self.err.close()
        return self.group.close()[1] if self.group else []

    def _line(self, deadline: float) -> tuple[str | None, float]:
        out = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WatchError(f"no status line within {WAIT_S:.0f} s: {self._err()}")
            if not select.select([out], [], [], left)[0]:
                continue
            chunk = os.read(out, 65536)
            if not chunk:
                if not self._pending:
                    return None, time.perf_counter()
                self._pending += b"\n"
            self._pending += chunk.replace(b"\r", b"\n")
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode(errors="replace"), time.perf_counter()

    def _err(self) -> str:
        self.err.seek(0)
        return self.err.read().decode(errors="replace")[-1500:].strip() or "(no stderr)"


def bench_watch(commands: dict[str, list[str]], regrades: int, counting: Counting) -> dict:
    """Start each watch process and wait for its first grading, then re-grade each
    `regrades` times, alternating, and interrupt them. Per name: the samples, or an error."""
    watchers: dict[str, Watcher] = {}
    results: dict[str, dict] = {}
    try:
        for name, command in commands.items():
            watcher = Watcher(command, Path(command[-1]), counting)
            watchers[name] = watcher
            try:
                arrived, reported = watcher.wait_for(1)
                watcher.settle()
            except WatchError as error:
                results[name] = {"error": str(error)}
                continue
            first = {
                "wall_s": arrived - watcher.started,
                "reported_s": reported,
                "score": watcher.score,
            }
            results[name] = {"first": first, "regrades": []}
        live = [name for name in watchers if "error" not in results[name]]
        for i in range(regrades):
            for name in live if i % 2 == 0 else live[::-1]:
                if "error" in results[name]:
                    continue
                try:
                    results[name]["regrades"].append(watchers[name].regrade(i + 2))
                except WatchError as error:
                    results[name] = {"error": str(error), **results[name]}
        for name in live:
            code = watchers[name].interrupt()
            results[name]["exit_on_sigint"] = code
    finally:
        for name, watcher in watchers.items():
            results.setdefault(name, {})["leftovers"] = watcher.close()
    return results


def rounds(commands: dict[str, list[str]], repeat: int, counting: Counting) -> dict:
    """REPEAT rounds of every command, rotating which goes first: name -> its runs."""
    runs: dict[str, list[Run]] = {name: [] for name in commands}
    names = list(commands)
    for i in range(repeat):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            runs[name].append(measure(commands[name], counting))
            wall = runs[name][-1].wall_s
            print(f"round {i + 1}/{repeat}: {name}: {wall:.2f} s", file=sys.stderr, flush=True)
    return runs


def summary(runs: list[Run], per: int = 1) -> dict:
    """Medians (and the wall's range) of some runs, divided by `per` (a batch's size)."""
    return {
        "runs": len(runs),
        "wall_s": statistics.median(r.wall_s for r in runs) / per,
        "cpu_s": statistics.median(r.cpu_s for r in runs) / per,
        "rusage_cpu_s": statistics.median(r.rusage_cpu_s for r in runs) / per,
        "min_wall_s": min(r.wall_s for r in runs) / per,
        "max_wall_s": max(r.wall_s for r in runs) / per,
        "leftovers": sum(r.leftovers for r in runs),
        "short": [line for r in runs for line in r.short],
    }


def machine(bin_dir: Path) -> dict:
    """What the figures were taken on."""

    def output(*command: str) -> str:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        return done.stdout.strip() if done.returncode == 0 else "?"

    model = next(
        (line.split(":", 1)[1].strip() for line in _lines("/proc/cpuinfo") if "model name" in line),
        "?",
    )
    mem = next((line.split()[1] for line in _lines("/proc/meminfo") if "MemTotal" in line), "0")
    dirty = output("git", "status", "--porcelain", "--untracked-files=no")
    return {
        "when": time.strftime("%Y-%m-%d %H:%M %Z"),
        "cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "memory_gib": round(int(mem) / 2**20, 1),
        "python": output(
            str(bin_dir / "python"), "-c", "import sys; print(sys.version.split()[0])"
        ),
        "torch": output(str(bin_dir / "python"), "-c", "import torch; print(torch.__version__)"),
        "grade": output(str(bin_dir / "grade"), "--version"),
        "commit": output("git", "rev-parse", "--short", "HEAD") + (" + changes" if dirty else ""),
        "bubblewrap": shutil.which("bwrap") is not None,
    }


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def kernel_starts(grade: str, notebook: str) -> list[str]:
    """What `grade -v` says on stderr about how its kernel started (also a warm-up)."""
    done = subprocess.run([grade, "-v", notebook, "--json"], capture_output=True, text=True)
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return lines[-5:] or [f"(nothing on stderr; exit {done.returncode})"]


def table(results: dict) -> list[str]:
    """The Markdown table: one row per measure, ratios against `jupyter execute`."""
    base = results["rows"]["jupyter execute"]
    lines = [
        "| row | runs | wall s | CPU s | wall x jupyter | CPU x jupyter |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for name, row in results["rows"].items():
        wall_x = row["wall_s"] / base["wall_s"]
        cpu_x = "" if row["cpu_s"] is None else f"{row['cpu_s'] / base['cpu_s']:.2f}"
        cpu = "" if row["cpu_s"] is None else f"{row['cpu_s']:.2f}"
        lines.append(
            f"| {name} | {row['runs']} | {row['wall_s']:.2f} | {cpu} | {wall_x:.2f} | {cpu_x} |"
        )
    return lines


def cpu_check(results: dict) -> list[str]:
    """The cgroup's CPU against getrusage's, per row that has both."""
    lines = ["| row | cgroup CPU s | getrusage CPU s | getrusage misses |", "|---|--:|--:|--:|"]
    for name, row in results["rows"].items():
        if row.get("rusage_cpu_s") is not None and row["cpu_s"]:
            missed = round(1 - row["rusage_cpu_s"] / row["cpu_s"], 2) + 0.0  # no "-0%"
            lines.append(
                f"| {name} | {row['cpu_s']:.2f} | {row['rusage_cpu_s']:.2f} | {missed:.0%} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, help="runs of each command (default 5; quick 1)")
    parser.add_argument("--count", type=int, help="notebooks in the batch (default 16; quick 4)")
    parser.add_argument("--quick", action="store_true", help="a smoke run (see above)")
    parser.add_argument("--bin", type=Path, default=Path(sys.executable).parent)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    repeat = args.repeat or (1 if args.quick else 5)
    count = args.count or (4 if args.quick else 16)
    regrades = max(repeat, 2) if args.quick else repeat
    bin_dir = args.bin.absolute()
    counting = Counting()
    facts = machine(bin_dir) | {"cpu_counted_in": counting.label}
    facts["load_before"] = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-template-") as scratch:
        commands, watches, setup = _commands(bin_dir, Path(scratch), count)
        show = _shower(Path(scratch), bin_dir)
        facts["kernel_start"] = kernel_starts(*commands["grade (first grading)"][:2])
        singles = ["jupyter execute", "grade (first grading)", "grade --cold"]
        if not args.quick:
            for name in singles:
                measure(commands[name], counting)  # warm-up: page cache, bytecode
        runs = rounds(commands, repeat, counting)
        help_text = subprocess.run([watches["watch re-grade"][0], "--help"], capture_output=True)
        has_watch = b"--watch" in help_text.stdout
        watch = bench_watch(watches, regrades, counting) if has_watch else {}
    facts["load_after"] = os.getloadavg()
    results = _results(runs, watch, count, repeat, facts)
    results["commands"] = {"setup": setup} | {
        name: show(command) for name, command in {**commands, **watches}.items()
    }
    if not has_watch:
        results["notes"].append("grade --help lists no --watch: the watch rows were not run")
    _print(results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, default=str))


def _commands(bin_dir: Path, scratch: Path, count: int) -> tuple[dict, dict, str]:
    """(the measured commands, the watch commands, the shell lines that make their files)."""
    grade, jupyter = str(bin_dir / "grade"), str(bin_dir / "jupyter")
    folders = {name: scratch / name for name in ("nb", "batch", "watch", "watch-cold")}
    for folder in folders.values():
        folder.mkdir()
    single = folders["nb"] / NOTEBOOK.name
    shutil.copy(NOTEBOOK, single)
    for k in range(1, count + 1):
        shutil.copy(NOTEBOOK, folders["batch"] / f"{k:02}-{NOTEBOOK.name}")
    for name in ("watch", "watch-cold"):
        shutil.copy(NOTEBOOK, folders[name] / NOTEBOOK.name)
    batch = str(folders["batch"])
    commands = {
        "jupyter execute": [jupyter, "execute", "--allow-errors", str(single)],
        "grade (first grading)": [grade, str(single), "--json"],
        "grade --cold": [grade, str(single), "--json", "--cold"],
    }
    for jobs in (1, 2):
        commands[f"batch of {count}, -j {jobs}, per notebook"] = [grade, batch, "-j", f"{jobs}"]
        commands[f"batch of {count}, -j {jobs} --cold, per notebook"] = [
            *commands[f"batch of {count}, -j {jobs}, per notebook"],
            "--cold",
        ]
    for name in list(commands):
        if name.startswith("batch"):
            commands[name].append("--json")
    watches = {
        "watch re-grade": [grade, "--watch", str(folders["watch"] / NOTEBOOK.name)],
        "watch --cold re-grade": [
            grade,
            "--watch",
            "--cold",
            str(folders["watch-cold"] / NOTEBOOK.name),
        ],
    }
    nb = os.path.relpath(NOTEBOOK, ROOT)
    setup = (
        f"T=$(mktemp -d); mkdir $T/nb $T/batch $T/watch $T/watch-cold; "
        f"cp {nb} $T/nb/; cp {nb} $T/watch/; cp {nb} $T/watch-cold/; "
        f"for k in $(seq -f %02g 1 {count}); do cp {nb} $T/batch/$k-{NOTEBOOK.name}; done"
    )
    return commands, watches, setup


def _shower(scratch: Path, bin_dir: Path) -> Callable[[list[str]], str]:
    """A command as a shell line from the repository root, the scratch folder as $T."""
    shown_bin = os.path.relpath(bin_dir, ROOT) if bin_dir.is_relative_to(ROOT) else str(bin_dir)

    def show(command: list[str]) -> str:
        line = shlex.join(command).replace(str(scratch), "$T")
        return line.replace(str(bin_dir), shown_bin)

    return show


def _results(runs: dict, watch: dict, count: int, repeat: int, facts: dict) -> dict:
    rows = {}
    for name, samples in runs.items():
        rows[name] = summary(samples, count if name.startswith("batch") else 1)
        rows[name]["batch_wall_s"] = statistics.median(r.wall_s for r in samples)
    notes = []
    for name, found in watch.items():
        if "error" in found:
            notes.append(f"{name}: {found['error']}")
        samples = found.get("regrades") or []
        if samples:
            cpus = [s["cpu_s"] for s in samples if s["cpu_s"] is not None]
            rows[name] = {
                "runs": len(samples),
                "wall_s": statistics.median(s["wall_s"] for s in samples),
                "cpu_s": statistics.median(cpus) if cpus else None,
                "reported_s": statistics.median(s["reported_s"] for s in samples),
                "min_wall_s": min(s["wall_s"] for s in samples),
                "max_wall_s": max(s["wall_s"] for s in samples),
            }
        scores = [found["first"]["score"]] if "first" in found else []
        scores += [s["score"] for s in samples]
        if any(score.split("/")[0] != score.split("/")[-1] for score in scores):
            notes.append(f"{name}: cards below full marks (or unread): {', '.join(scores)}")
        if found.get("exit_on_sigint", 130) != 130:
            notes.append(f"{name}: exit code {found['exit_on_sigint']} on SIGINT, not 130")
        if found.get("leftovers"):
            notes.append(f"{name}: left running (killed): {found['leftovers']}")
    for name, row in rows.items():
        if row.get("leftovers"):
            notes.append(f"{name}: {row['leftovers']} processes left running after it ended")
        if row.get("short"):
            shown = "; ".join(row["short"][:3])
            notes.append(f"{name}: {len(row['short'])} results below full marks: {shown}")
    results = {
        "notebook": os.path.relpath(NOTEBOOK, ROOT),
        "repeat": repeat,
        "count": count,
        "machine": facts,
        "rows": rows,
        "watch": watch,
        "runs": {name: [asdict(r) for r in samples] for name, samples in runs.items()},
        "notes": notes,
    }
    for cold in ("", " --cold"):
        one, two = (rows.get(f"batch of {count}, -j {j}{cold}, per notebook") for j in (1, 2))
        if one and two:
            results[f"speedup_j2_over_j1{cold.replace(' --', '_')}"] = one["wall_s"] / two["wall_s"]
    return results


def _print(results: dict) -> None:
    facts = results["machine"]
    load = "/".join(f"{x:.2f}" for x in facts["load_before"])
    load_after = "/".join(f"{x:.2f}" for x in facts["load_after"])
    rounds = f"{results['repeat']} round" + ("s" if results["repeat"] > 1 else "")
    print(f"\n{results['notebook']}: {rounds}, a batch of {results['count']}")
    print(
        f"{facts['when']}; {facts['cpus']} cores ({facts['usable_cpus']} usable), "
        f"{facts['cpu_model']}, {facts['memory_gib']} GiB; load average {load} before, "
        f"{load_after} after"
    )
    print(
        f"Python {facts['python']}, torch {facts['torch']}, {facts['grade']}, "
        f"commit {facts['commit']}, bubblewrap {'installed' if facts['bubblewrap'] else 'absent'}"
    )
    print(f"CPU counted in {facts['cpu_counted_in']}")
    print("kernel start (`grade -v`): " + " | ".join(facts["kernel_start"]))
    print()
    print("\n".join(table(results)))
    speedups = [results.get(f"speedup_j2_over_j1{cold}") for cold in ("", "_cold")]
    if None not in speedups:
        print(
            f"\nbatch wall, -j 1 over -j 2: {speedups[0]:.2f}x from the template, "
            f"{speedups[1]:.2f}x --cold"
        )
    for name, found in results["watch"].items():
        if found.get("regrades"):
            row = results["rows"][name]
            print(
                f"{name}: grade reports {row['reported_s']:.2f} s (median); first grading "
                f"{found['first']['wall_s']:.2f} s; exit on SIGINT {found['exit_on_sigint']}; "
                f"scores {found['first']['score']}, "
                + ", ".join(sample["score"] for sample in found["regrades"])
            )
    if not facts["cpu_counted_in"].startswith("getrusage"):
        print("\nCPU, the cgroup's count against getrusage's (waited children only):\n")
        print("\n".join(cpu_check(results)))
    print("\ncommands (from the repository root):")
    for name, line in results["commands"].items():
        print(f"  {name}: {line}")
    for note in results["notes"]:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
