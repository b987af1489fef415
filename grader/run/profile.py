"""`--profile`: after the hidden suite, how the candidate's forward pass scales, against
torch's own. Never part of the score.

At each sequence length T the candidate's forward is timed and its peak memory measured in
the kernel (`Kernel.profile`: the output never crosses the channel), and torch's is
measured the same way (`grader.kernel.measure`, the same code) in this process, with the
grader's pristine torch, on the same device and with as many torch threads as the kernel
used. What to build and call at each T is the exercise's (`Exercise.profile`, a
`Profiled`); nothing here knows what an exercise is about.

The result is plain JSON-ready data (`run_profile`), kept in `GradeReport.profile`:

    {"device": "cpu", "device_name": "...", "threads": 1,
     "candidate": "MultiHeadAttention", "baseline": "torch.nn.MultiheadAttention(...)",
     "sizes": {"B": 1, "E": 64, "H": 4}, "lengths": [128, ..., 2048],
     "rows": [{"T": 128, "candidate_ms": 0.41, "torch_ms": 0.30, "time_ratio": 1.37,
               "candidate_peak_bytes": 593920, "torch_peak_bytes": 593920,
               "memory_ratio": 1.0, "candidate_runs": 7, "torch_runs": 7,
               "error": null, "torch_error": null}, ...],
     "exponents": {"candidate_time": 1.6, "torch_time": 1.7,
                   "candidate_memory": 2.0, "torch_memory": 2.0},
     "summary": ["time grows as T^1.6 (torch: T^1.7)", ...], "seconds": 4.1, "error": null}

`render_profile` prints it as a table; `profile_svg` plots it (two log-log panels).
"""

from __future__ import annotations

import contextlib
import math
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol
from xml.sax.saxutils import escape

from grader.core.outcomes import CallTimeout, CandidateOutcome, Failed, KernelCrashed
from grader.core.text import printable, xml_safe

if TYPE_CHECKING:
    from rich.console import Console

    from grader.core.limits import Limits
    from grader.suite.exercise import Exercise
    from grader.suite.handle import Kernel, Remote

# The sequence lengths profiled: on a GPU two more, where quadratic memory starts to tell.
CPU_LENGTHS = (128, 256, 512, 1024, 2048)
CUDA_LENGTHS = (*CPU_LENGTHS, 4096, 8192)
# Per length and side: timed calls at most, and the seconds after which no more are made
# (at least one always is); one warm-up call before, one memory call after.
REPEAT = 7
BUDGET_S = 0.25
WARMUP = 1


class Profiled(Protocol):
    """What an exercise's `profile` provides (for the attention exercises,
    `exercises/_attention.py`'s `Profile`)."""

    def describe(self) -> dict[str, Any]:
        """Plain data: "candidate" (what is timed), "baseline" (torch's, as built) and
        "sizes" (the other dimensions, by name)."""
        ...

    def candidate(self, kernel: Kernel, length: int) -> tuple[Remote, tuple, dict[str, Any]]:
        """The candidate's callable at sequence length `length`, built in the kernel, with
        its arguments: (remote, args, kwargs)."""
        ...

    def baseline(self, length: int, device: str) -> Callable[[], Any]:
        """Torch's own at `length` on `device`, in this process: a call of no arguments."""
        ...


def lengths_for(device: str) -> tuple[int, ...]:
    """The sequence lengths profiled on `device`."""
    return CUDA_LENGTHS if device.startswith("cuda") else CPU_LENGTHS


def run_profile(
    exercise: Exercise,
    kernel: Kernel,
    limits: Limits,
    lengths: Sequence[int] | None = None,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Profile the candidate's forward against torch's at each length (default: 128 to
    2048, on a GPU to 8192) and return the data described in the module's docstring.

    Whatever the candidate's code does is a row: a forward that raises at some T says so
    there; one that times out or kills the kernel says so, and the longer lengths are not
    run. `deadline` (time.monotonic) ends it early, as the grading's own limit."""
    started = time.monotonic()
    device = limits.device
    data: dict[str, Any] = {
        "device": device,
        "device_name": _device_name(device),
        "threads": None,
        "candidate": "",
        "baseline": "",
        "sizes": {},
        "lengths": list(lengths or lengths_for(device)),
        "rows": [],
        "exponents": {},
        "summary": [],
        "seconds": 0.0,
        "error": None,
    }
    spec: Profiled | None = exercise.profile
    if spec is None:
        data["error"] = f"exercise {exercise.id} has no profile"
    else:
        try:
            data.update(_described(spec.describe()))
            data["rows"] = _rows(spec, kernel, limits, data, deadline)
        except Exception as error:  # the exercise's profile code broke: say so, grade on
            text = " ".join(f"{type(error).__name__}: {error}".split())[:300]
            data["error"] = f"the profile could not run: {text}"
    data["exponents"] = exponents(data["rows"])
    data["summary"] = summary(data)
    data["seconds"] = round(time.monotonic() - started, 3)
    return data


def _described(described: dict[str, Any]) -> dict[str, Any]:
    sizes = described.get("sizes") or {}
    return {
        "candidate": str(described.get("candidate", "")),
        "baseline": str(described.get("baseline", "")),
        "sizes": {str(k): int(v) for k, v in sizes.items()},
    }


def _rows(
    spec: Profiled,
    kernel: Kernel,
    limits: Limits,
    data: dict[str, Any],
    deadline: float | None,
) -> list[dict[str, Any]]:
    from grader.kernel.measure import measure_call

    rows, stop = [], ""
    for length in data["lengths"]:
        row = _row(length)
        rows.append(row)
        if deadline is not None and time.monotonic() >= deadline:
            row["error"] = "not run: the grading's time limit was reached"
            continue  # nor torch's: the grading is over
        if stop:  # a shorter length timed out or killed the kernel: torch's still runs
            row["error"] = stop
        else:
            try:
                if length in checked_lengths(data["lengths"]) and hasattr(spec, "check"):
                    spec.check(kernel, length)
                target, args, kwargs = spec.candidate(kernel, length)
                got = kernel.profile(
                    target, args, kwargs, repeat=REPEAT, warmup=WARMUP, budget=BUDGET_S,
                    timeout=limits.call_timeout,
                )  # fmt: skip
            except CallTimeout:
                row["error"] = (
                    f"timed out (its runs took past the {limits.call_timeout:g} s call limit)"
                )
                stop = f"not run: T={length} timed out"
            except KernelCrashed:
                row["error"] = "the kernel died (memory?)"
                stop = f"not run: the kernel died at T={length}"
            except Failed as failed:  # the output is wrong: its speed means nothing
                row["error"] = f"not timed: wrong output at T={length}: {failed.message()}"
                stop = f"not timed: wrong output at T={length}"
            except CandidateOutcome as outcome:
                row["error"] = outcome.message()
            else:
                row["candidate_ms"] = _ms(_median(got["times"]))
                row["candidate_peak_bytes"] = got["peak_bytes"]
                row["candidate_runs"] = len(got["times"])
                if not row["candidate_ms"]:
                    row["candidate_ms"] = None
                    row["error"] = "ran in no measurable time: not compared"
        # torch's baseline with the grader's own thread count: the notebook's setting
        # (torch.set_num_threads(64) in a cell) says nothing about this machine
        data["threads"] = _grader_threads()
        try:
            with _torch_threads(data["threads"]):
                ours = measure_call(
                    spec.baseline(length, limits.device), repeat=REPEAT, warmup=WARMUP,
                    budget=BUDGET_S, device=limits.device,
                )  # fmt: skip
        except Exception as error:  # torch's own failing (out of GPU memory, say)
            row["torch_error"] = " ".join(f"{type(error).__name__}: {error}".split())[:300]
        else:
            row["torch_ms"] = _ms(_median(ours["times"]))
            row["torch_peak_bytes"] = int(ours["peak_bytes"])
            row["torch_runs"] = len(ours["times"])
        row["time_ratio"] = _ratio(row["candidate_ms"], row["torch_ms"])
        row["memory_ratio"] = _ratio(row["candidate_peak_bytes"], row["torch_peak_bytes"])
    return rows


def _row(length: int) -> dict[str, Any]:
    return {
        "T": length,
        "candidate_ms": None,
        "torch_ms": None,
        "time_ratio": None,
        "candidate_peak_bytes": None,
        "torch_peak_bytes": None,
        "memory_ratio": None,
        "candidate_runs": 0,
        "torch_runs": 0,
        "error": None,
        "torch_error": None,
    }


# The longest length whose output is checked: its float64 weights, [B, H, T, T], must
# cross the call channel (64 MiB of tensors) with room to spare.
CHECKED_UP_TO = 1024


def checked_lengths(lengths: Sequence[int]) -> set[int]:
    """The lengths whose output is checked before it is timed: the shortest, and the
    longest up to CHECKED_UP_TO (checking every length would double the profile's time;
    these catch a forward that only computes attention at the sizes the tests use)."""
    within = [t for t in lengths if t <= CHECKED_UP_TO]
    return {min(lengths), max(within)} if within else set(lengths[:1])


def _grader_threads() -> int:
    """torch's thread count for this machine, as a fresh process would choose it."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _device_name(device: str) -> str:
    """The GPU's name, or the CPU's model (Linux), else its architecture."""
    if device.startswith("cuda"):
        with contextlib.suppress(Exception):
            import torch

            return str(torch.cuda.get_device_name(torch.device(device)))
        return device
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name") and ":" in line:
                return " ".join(line.split(":", 1)[1].split())
    return platform.processor() or platform.machine() or "cpu"


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 4)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b and b > 0 else None


# -- growth and summary ----------------------------------------------------------------


def growth_exponent(lengths: Sequence[float], values: Sequence[float | None]) -> float | None:
    """The least-squares slope of log(value) against log(T) over the positive values: k in
    value ~ T^k. None with fewer than two such points (or a single length)."""
    points = [
        (math.log(t), math.log(v))
        for t, v in zip(lengths, values, strict=True)
        if v is not None and v > 0 and t > 0
    ]
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def exponents(rows: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """The growth exponents of time and memory, the candidate's and torch's."""
    lengths = [row["T"] for row in rows]
    found = {
        "candidate_time": growth_exponent(lengths, [r["candidate_ms"] for r in rows]),
        "torch_time": growth_exponent(lengths, [r["torch_ms"] for r in rows]),
        "candidate_memory": growth_exponent(lengths, [r["candidate_peak_bytes"] for r in rows]),
        "torch_memory": growth_exponent(lengths, [r["torch_peak_bytes"] for r in rows]),
    }
    return {name: None if k is None else round(k, 3) for name, k in found.items()}


def summary(data: dict[str, Any]) -> list[str]:
    """Sentences for the reader: how time and memory grow, how they compare with torch's
    at the longest length both ran, and which lengths failed."""
    lines = []
    if data.get("error"):
        lines.append(str(data["error"]))
    rows = data.get("rows") or []
    k = data.get("exponents") or {}
    for what, key in (("time", "time"), ("memory", "memory")):
        ours, theirs = k.get(f"candidate_{key}"), k.get(f"torch_{key}")
        if ours is not None:
            torch_part = f" (torch: T^{theirs:.1f})" if theirs is not None else ""
            lines.append(f"{what} grows as T^{ours:.1f}{torch_part}")
    both = [r for r in rows if r["time_ratio"] is not None]
    if both:
        last = both[-1]
        lines.append(f"{_speed(last['time_ratio'])} at T={last['T']}")
    both = [r for r in rows if r["memory_ratio"] is not None]
    if both:
        last = both[-1]
        lines.append(f"{last['memory_ratio']:.1f}x torch's peak memory at T={last['T']}")
    failed = [r for r in rows if r["error"]]
    if failed:
        where = ", ".join(str(r["T"]) for r in failed)
        lines.append(f"forward did not run at T={where}: {failed[0]['error']}")
    broken = [r for r in rows if r["torch_error"]]
    if broken:
        where = ", ".join(str(r["T"]) for r in broken)
        lines.append(f"torch's own did not run at T={where}: {broken[0]['torch_error']}")
    return lines


def _speed(ratio: float) -> str:
    if ratio <= 0:
        return "too fast to time against torch"
    if ratio >= 1.05:
        return f"{ratio:.1f}x slower than torch"
    if ratio <= 1 / 1.05:
        return f"{1 / ratio:.1f}x faster than torch"
    return "as fast as torch"


# -- the card ---------------------------------------------------------------------------


def format_bytes(size: float | None) -> str:
    """1536 -> "1.5 KiB"; None -> "—"."""
    if size is None:
        return "—"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover (the loop returns)


def _cell(value: float | None, digits: str = ".3g", suffix: str = "") -> str:
    return "—" if value is None else f"{value:{digits}}{suffix}"


def render_profile(profile: dict[str, Any], console: Console) -> None:
    """Print the profile: a table of time and peak memory per T, the candidate's against
    torch's, then the summary sentences. Every string that may come from the candidate
    goes through `printable` and is shown as text, never markup."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    if not profile.get("rows"):  # nothing was measured (no profile, or it broke): say why
        for line in profile.get("summary") or []:
            console.print(Text(printable(line)))
        return
    sizes = " ".join(f"{k}={v}" for k, v in (profile.get("sizes") or {}).items())
    threads = profile.get("threads")
    where = str(profile.get("device", "cpu"))
    if profile.get("device_name"):
        where += f" ({profile['device_name']})"
    if threads and not where.startswith("cuda"):
        where += f", {threads} torch thread{'s' if threads != 1 else ''}"
    console.print(
        Text.assemble(
            ("Profile", "bold"),
            (" (not scored)\n", "dim"),
            printable(
                f"  {profile.get('candidate') or 'forward'} vs {profile.get('baseline') or 'torch'}"
                f"\n  {sizes}; {where}"
            ),
        )
    )
    table = Table(box=box.SIMPLE_HEAD)
    for name in ("T", "yours (ms)", "torch (ms)", "ratio", "your peak", "torch peak", "ratio"):
        table.add_column(name, justify="right")
    notes = []
    for row in profile.get("rows") or []:
        error, torch_error = row.get("error"), row.get("torch_error")
        if error:
            notes.append(Text(printable(f"T={row['T']}: {error}"), style="red"))
        if torch_error:
            notes.append(Text(printable(f"T={row['T']}, torch: {torch_error}"), style="yellow"))
        failed = Text("not run" if str(error).startswith("not run") else "failed", style="red")
        table.add_row(
            Text(str(row["T"])),
            failed if error else Text(_cell(row.get("candidate_ms"))),
            Text(_cell(row.get("torch_ms"))),
            Text(_cell(row.get("time_ratio"), ".2f", "x")),
            Text("—") if error else Text(format_bytes(row.get("candidate_peak_bytes"))),
            Text(format_bytes(row.get("torch_peak_bytes"))),
            Text(_cell(row.get("memory_ratio"), ".2f", "x")),
        )
    console.print(table)
    for note in notes:
        console.print(note)
    for line in profile.get("summary") or []:
        console.print(Text(printable(f"  {line}")))


# -- the plot ---------------------------------------------------------------------------

_WIDTH, _HEIGHT = 900, 415
_PANEL_W, _PANEL_H = 340, 270  # the plotting area of each panel
_LEFT, _TOP = 80, 75
_GAP = 450  # from one panel's left edge to the next
_COLOURS = {"candidate": "#d62728", "torch": "#1f77b4"}


def profile_svg(profile: dict[str, Any]) -> str:
    """A self-contained SVG of the profile: two log-log panels, median time and peak
    memory against T, the candidate's and torch's, with labelled axes and a legend."""
    rows = profile.get("rows") or []
    candidate = profile.get("candidate") or "forward"
    baseline = profile.get("baseline") or "torch"
    sizes = " ".join(f"{k}={v}" for k, v in (profile.get("sizes") or {}).items())
    where = str(profile.get("device", "cpu"))
    details = "; ".join(part for part in (f"torch: {baseline}", sizes, where) if part)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" font-family="Helvetica, Arial, sans-serif" '
        'font-size="12">',
        f"<title>{_text(f'Profile: {candidate} vs {baseline} on {where}')}</title>",
        f'<rect width="{_WIDTH}" height="{_HEIGHT}" fill="white"/>',
        f'<text x="{_WIDTH / 2:g}" y="20" text-anchor="middle" font-size="14" '
        f'font-weight="bold">{_text(f"{candidate} vs torch (not scored)")}</text>',
        f'<text x="{_WIDTH / 2:g}" y="38" text-anchor="middle" fill="#555">{_text(details)}</text>',
    ]
    panels = (
        ("time", "median time per forward", "time (ms)", "candidate_ms", "torch_ms", 1.0),
        ("memory", "peak memory", "peak memory (MiB)", "candidate_peak_bytes",
         "torch_peak_bytes", 1 / 1024**2),
    )  # fmt: skip
    for index, (name, heading, label, ours, theirs, scale) in enumerate(panels):
        series = {
            "candidate": _points(rows, ours, scale),
            "torch": _points(rows, theirs, scale),
        }
        parts.append(_panel(name, heading, label, series, _LEFT + index * _GAP, _TOP))
    if not any(_points(rows, key, 1.0) for key in ("candidate_ms", "torch_ms")):
        why = profile.get("error") or "nothing was measured"
        parts.append(
            f'<text x="{_WIDTH / 2:g}" y="{_HEIGHT / 2:g}" text-anchor="middle" fill="#a00" '
            f'font-size="14">{_text(f"no measurements: {why}")}</text>'
        )
    missing = ", ".join(str(row.get("T")) for row in rows if row.get("error"))
    if missing:
        note = _text(f"yours did not run at T={missing} (see the report)")
        parts.append(f'<text x="{_LEFT:g}" y="{_HEIGHT - 8:g}" fill="#a00">{note}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _points(rows: Sequence[dict[str, Any]], key: str, scale: float) -> list[tuple[float, float]]:
    points = []
    for row in rows:
        value = row.get(key)
        if isinstance(value, (int, float)) and value > 0 and row.get("T", 0) > 0:
            points.append((float(row["T"]), float(value) * scale))
    return points


def _panel(
    name: str,
    heading: str,
    label: str,
    series: dict[str, list[tuple[float, float]]],
    left: float,
    top: float,
) -> str:
    right, bottom = left + _PANEL_W, top + _PANEL_H
    parts = [
        f'<g class="panel" id="{name}">',
        f'<text x="{left + _PANEL_W / 2:g}" y="{top - 10:g}" text-anchor="middle" '
        f'font-weight="bold">{_text(heading)}</text>',
        f'<rect x="{left:g}" y="{top:g}" width="{_PANEL_W}" height="{_PANEL_H}" '
        'fill="none" stroke="#444"/>',
        f'<text x="{left + _PANEL_W / 2:g}" y="{bottom + 40:g}" text-anchor="middle">'
        "sequence length T (log scale)</text>",
        f'<text x="{left - 55:g}" y="{top + _PANEL_H / 2:g}" text-anchor="middle" '
        f'transform="rotate(-90 {left - 55:g} {top + _PANEL_H / 2:g})">'
        f"{_text(label + ' (log scale)')}</text>",
    ]
    every = [p for points in series.values() for p in points]
    if not every:
        parts.append(
            f'<text x="{left + _PANEL_W / 2:g}" y="{top + _PANEL_H / 2:g}" '
            'text-anchor="middle" fill="#888">no data</text>'
        )
        parts.append("</g>")
        return "\n".join(parts)
    xs = _log_range([x for x, _ in every], pad=0.05)
    ys = _log_range([y for _, y in every], pad=0.08)

    def sx(x: float) -> float:
        return left + (math.log10(x) - xs[0]) / (xs[1] - xs[0]) * _PANEL_W

    def sy(y: float) -> float:
        return bottom - (math.log10(y) - ys[0]) / (ys[1] - ys[0]) * _PANEL_H

    for x in sorted({x for x, _ in every}):
        px = sx(x)
        parts.append(
            f'<line x1="{px:.1f}" y1="{top:g}" x2="{px:.1f}" y2="{bottom:g}" stroke="#eee"/>'
            f'<line x1="{px:.1f}" y1="{bottom:g}" x2="{px:.1f}" y2="{bottom + 5:g}" '
            'stroke="#444"/>'
            f'<text x="{px:.1f}" y="{bottom + 18:g}" text-anchor="middle">{x:g}</text>'
        )
    for y in _log_ticks(*ys):
        py = sy(y)
        parts.append(
            f'<line x1="{left:g}" y1="{py:.1f}" x2="{right:g}" y2="{py:.1f}" stroke="#eee"/>'
            f'<line x1="{left - 5:g}" y1="{py:.1f}" x2="{left:g}" y2="{py:.1f}" '
            'stroke="#444"/>'
            f'<text x="{left - 8:g}" y="{py + 4:.1f}" text-anchor="end">{y:g}</text>'
        )
    for who, points in series.items():
        if not points:
            continue
        colour = _COLOURS[who]
        dash = ' stroke-dasharray="6 4"' if who == "torch" else ""
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
        parts.append(
            f'<polyline class="{who}" points="{path}" fill="none" stroke="{colour}" '
            f'stroke-width="2"{dash}/>'
        )
        for x, y in points:
            tip = f"<title>{_text(f'{who}: T={x:g}, {y:.4g}')}</title>"
            if who == "torch":  # squares: visible where the two coincide
                parts.append(
                    f'<rect x="{sx(x) - 3.5:.1f}" y="{sy(y) - 3.5:.1f}" width="7" height="7" '
                    f'fill="{colour}">{tip}</rect>'
                )
            else:
                parts.append(
                    f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="{colour}">{tip}'
                    "</circle>"
                )
    for offset, (who, text) in enumerate((("candidate", "yours"), ("torch", "torch"))):
        y = top + 16 + offset * 18
        dash = ' stroke-dasharray="6 4"' if who == "torch" else ""
        parts.append(
            f'<line x1="{left + 10:g}" y1="{y - 4:g}" x2="{left + 34:g}" y2="{y - 4:g}" '
            f'stroke="{_COLOURS[who]}" stroke-width="2"{dash}/>'
            f'<text x="{left + 40:g}" y="{y:g}">{text}</text>'
        )
    parts.append("</g>")
    return "\n".join(parts)


def _log_range(values: Sequence[float], pad: float) -> tuple[float, float]:
    """log10 bounds around `values`, padded; at least a factor of 2 wide."""
    low, high = math.log10(min(values)), math.log10(max(values))
    if high - low < math.log10(2):
        middle = (high + low) / 2
        low, high = middle - math.log10(2) / 2, middle + math.log10(2) / 2
    span = high - low
    return low - pad * span, high + pad * span


def _log_ticks(low: float, high: float) -> list[float]:
    """Tick values between 10^low and 10^high: the powers of ten, with 2 and 5 times them
    where fewer than three powers fall in the range."""
    multiples: tuple[float, ...] = (1.0,)
    if math.floor(high) - math.ceil(low) + 1 < 3:
        multiples = (1.0, 2.0, 5.0)
    ticks = []
    for power in range(math.floor(low), math.ceil(high) + 1):
        for m in multiples:
            value = m * 10.0**power
            if low <= math.log10(value) <= high:
                ticks.append(float(f"{value:.6g}"))
    return ticks


def _text(text: str) -> str:
    """Text for an SVG element: escaped, and without characters XML forbids."""
    return escape(xml_safe(printable(text)))
