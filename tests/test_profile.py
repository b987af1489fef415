"""`--profile` and `--device`: the candidate's forward timed and measured in the kernel
against torch's own in the grader (never scored); the growth fit, the table and the SVG
plot; and the device plumbing (tensors moved to the device in the kernel, modules built on
the CPU then moved, per-device tolerances), exercised here on the CPU and, where a GPU is
visible, on CUDA."""

from __future__ import annotations

import io
import math
import xml.etree.ElementTree as ET

import nbformat
import pytest
import torch
from rich.console import Console

from grader.core.limits import Limits
from grader.core.outcomes import CandidateRaised, NoAnswer
from grader.kernel.measure import measure_call, peak_memory, running_peak
from grader.run.inprocess import InProcessSession
from grader.run.pipeline import grade_notebook
from grader.run.profile import (
    CPU_LENGTHS,
    CUDA_LENGTHS,
    exponents,
    growth_exponent,
    profile_svg,
    render_profile,
    run_profile,
    summary,
)
from grader.suite import checks
from grader.suite.corpus import Mutant, apply
from grader.suite.exercise import Exercise
from grader.suite.handle import Kernel, _measurement
from tests.helpers import SOLUTIONS

SVG = "{http://www.w3.org/2000/svg}"
TIME_EXPONENTS = ("candidate_time", "torch_time")
CUDA = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU: torch sees none on this machine"
)


def _rows(*lengths_ms_bytes, error_at=()):
    """Profile rows for (T, candidate ms, torch ms, candidate bytes, torch bytes)."""
    rows = []
    for t, cm, tm, cb, tb in lengths_ms_bytes:
        failed = t in error_at
        rows.append(
            {
                "T": t,
                "candidate_ms": None if failed else cm,
                "torch_ms": tm,
                "time_ratio": None if failed else round(cm / tm, 3),
                "candidate_peak_bytes": None if failed else cb,
                "torch_peak_bytes": tb,
                "memory_ratio": None if failed else round(cb / tb, 3),
                "candidate_runs": 0 if failed else 3,
                "torch_runs": 3,
                "error": "MultiHeadAttention.forward raised RuntimeError: boom" if failed else None,
                "torch_error": None,
            }
        )
    return rows


def _profile(rows, **extra):
    data = {
        "device": "cpu",
        "device_name": "test CPU",
        "threads": 1,
        "candidate": "MultiHeadAttention.forward",
        "baseline": "nn.MultiheadAttention(64, 4) (need_weights=True, per head)",
        "sizes": {"B": 1, "E": 64, "H": 4},
        "lengths": [r["T"] for r in rows],
        "rows": rows,
        "seconds": 1.0,
        "error": None,
        **extra,
    }
    data["exponents"] = exponents(rows)
    data["summary"] = summary(data)
    return data


QUADRATIC = [(t, 1.4e-5 * t * t, 1e-5 * t * t, 8 * t * t, 8 * t * t) for t in CPU_LENGTHS]


# -- the growth fit and the summary (no kernel) ------------------------------------------


def test_growth_exponent_is_the_log_log_slope():
    lengths = [128, 256, 512, 1024]
    assert growth_exponent(lengths, [3 * t**2 for t in lengths]) == pytest.approx(2.0)
    assert growth_exponent(lengths, [5 * t for t in lengths]) == pytest.approx(1.0)
    # least squares over noisy points: between the slopes of its pieces
    noisy = [1.0, 4.4, 15.0, 70.0]
    k = growth_exponent(lengths, noisy)
    assert k is not None and 1.9 < k < 2.2
    want = sum(
        (math.log(t) - sum(map(math.log, lengths)) / 4)
        * (math.log(v) - sum(map(math.log, noisy)) / 4)
        for t, v in zip(lengths, noisy, strict=True)
    ) / sum((math.log(t) - sum(map(math.log, lengths)) / 4) ** 2 for t in lengths)
    assert k == pytest.approx(want)


def test_growth_exponent_skips_missing_values_and_needs_two_points():
    assert growth_exponent([128, 256, 512], [None, 2.0, 8.0]) == pytest.approx(2.0)
    assert growth_exponent([128, 256, 512], [1.0, 0.0, 4.0]) == pytest.approx(1.0)
    assert growth_exponent([128, 256], [None, 2.0]) is None
    assert growth_exponent([128, 128], [1.0, 2.0]) is None
    assert growth_exponent([], []) is None


def test_summary_says_how_it_grows_and_how_it_compares():
    data = _profile(_rows(*QUADRATIC))
    assert data["exponents"]["candidate_memory"] == pytest.approx(2.0)
    assert data["exponents"]["candidate_time"] == pytest.approx(2.0)
    assert "memory grows as T^2.0 (torch: T^2.0)" in data["summary"]
    assert "time grows as T^2.0 (torch: T^2.0)" in data["summary"]
    assert "1.4x slower than torch at T=2048" in data["summary"]
    assert "1.0x torch's peak memory at T=2048" in data["summary"]


def test_summary_compares_at_the_longest_length_both_ran_and_names_failures():
    data = _profile(_rows(*QUADRATIC, error_at=(2048,)))
    assert "1.4x slower than torch at T=1024" in data["summary"]
    assert any(line.startswith("forward did not run at T=2048: ") for line in data["summary"])
    fast = _profile(_rows(*[(t, 0.5 * tm, tm, b, b) for t, _, tm, b, _ in QUADRATIC]))
    assert "2.0x faster than torch at T=2048" in fast["summary"]


# -- the table and the plot (no kernel) --------------------------------------------------


def test_render_profile_prints_a_row_per_length_and_the_summary():
    console = Console(file=io.StringIO(), width=120, color_system=None)
    render_profile(_profile(_rows(*QUADRATIC, error_at=(2048,))), console)
    text = console.file.getvalue()
    for t in CPU_LENGTHS:
        assert f"\n {t:>5} " in text or f" {t} " in text
    assert "not scored" in text
    assert "memory grows as T^2.0" in text
    assert "T=2048: MultiHeadAttention.forward raised RuntimeError: boom" in text
    assert "failed" in text


def test_render_profile_shows_candidate_text_literally():
    rows = _rows(*QUADRATIC, error_at=(2048,))
    rows[-1]["error"] = "raised [bold red]x[/bold red] \x1b[31m"
    console = Console(file=io.StringIO(), width=200, color_system=None)
    render_profile(_profile(rows, candidate="[link=x]Evil[/link]"), console)
    text = console.file.getvalue()
    assert "[bold red]x[/bold red] \\x1b[31m" in text
    assert "[link=x]Evil[/link]" in text
    assert "\x1b" not in text


def _panels(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return {g.get("id", ""): g for g in root.iter(f"{SVG}g") if g.get("class") == "panel"}


def _texts(element: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in element.iter(f"{SVG}text")]


def test_svg_has_two_labelled_log_log_panels_with_both_series():
    svg = profile_svg(_profile(_rows(*QUADRATIC)))
    panels = _panels(svg)
    assert sorted(panels) == ["memory", "time"]
    for name, panel in panels.items():
        texts = _texts(panel)
        assert "sequence length T (log scale)" in texts
        assert any(t.startswith("time (ms)" if name == "time" else "peak memory") for t in texts)
        assert {"128", "2048"} <= set(texts)  # the lengths label the x axis
        lines = {p.get("class"): p for p in panel.iter(f"{SVG}polyline")}
        assert sorted(lines) == ["candidate", "torch"]
        points = [tuple(map(float, p.split(","))) for p in lines["candidate"].get("points").split()]
        assert len(points) == len(CPU_LENGTHS)
        xs, ys = [x for x, _ in points], [y for _, y in points]
        # log-log: equal steps in log T are equal steps across; y grows upwards (screen down)
        steps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
        assert max(steps) - min(steps) < 0.5
        assert ys == sorted(ys, reverse=True)


def test_svg_escapes_candidate_text_and_survives_missing_data():
    rows = _rows(*QUADRATIC, error_at=(1024, 2048))
    svg = profile_svg(_profile(rows, candidate="<script>alert(1)</script> & \x00"))
    assert "<script>" not in svg
    panels = _panels(svg)  # parses
    assert len(panels) == 2
    assert "yours did not run at T=1024, 2048" in svg
    empty = _panels(profile_svg(_profile([])))
    assert all("no data" in _texts(panel) for panel in empty.values())


# -- measuring (no kernel) --------------------------------------------------------------


def test_running_peak_is_the_highest_running_sum_in_time_order():
    assert running_peak([(3, -100), (1, 100), (2, 50), (4, 10)]) == 150
    assert running_peak([]) == 0


def test_cpu_peak_memory_sees_the_scores_of_attention():
    """B*H*T*T float32 scores and their softmax, both alive at once: twice B*H*T*T*4."""
    b, h, t, d = 1, 4, 512, 16
    q = torch.randn(b, h, t, d)

    def attention():
        scores = q @ q.transpose(-1, -2)
        return scores.softmax(-1) @ q

    one = b * h * t * t * 4
    peak = peak_memory(attention)
    assert 2 * one <= peak < 2 * one + 4 * b * h * t * d * 4 + 65536
    assert peak_memory(lambda: torch.empty(1000, dtype=torch.float64)) == 8000


def test_measure_call_times_at_least_once_and_stops_at_its_budget():
    calls = []
    got = measure_call(lambda: calls.append(1), repeat=50, warmup=2, budget=0.0)
    assert len(got["times"]) == 1 and len(calls) == 2 + 1 + 1  # warm-up, timed, memory
    got = measure_call(lambda: None, repeat=4, warmup=0, budget=10.0)
    assert len(got["times"]) == 4 and all(t >= 0 for t in got["times"])
    assert got["threads"] == torch.get_num_threads() and got["peak_bytes"] == 0


@pytest.mark.parametrize(
    "value",
    [
        None,
        [],
        {"times": [], "peak_bytes": 1, "threads": 1},
        {"times": [0.1, -1.0], "peak_bytes": 1, "threads": 1},
        {"times": [0.1], "peak_bytes": float("inf"), "threads": 1},
        {"times": [0.1], "peak_bytes": 1, "threads": True},
        {"times": ["0.1"], "peak_bytes": 1, "threads": 1},
    ],
)
def test_a_forged_measurement_is_no_answer(value):
    with pytest.raises(NoAnswer):
        _measurement(value)


# -- the shim's profile op and device moves, in process (no kernel) ------------------------

NOTEBOOK = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, width, extra=None):
        super().__init__()
        self.extra_device = None if extra is None else str(extra.device)
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        if x.shape[1] > 64:
            raise RuntimeError("too long")
        return x @ x.transpose(-1, -2)

def device_of(x):
    return str(x.device)

def devices(xs, named):
    return [str(x.device) for x in xs] + [str(x.device) for x in named.values()]

def param_device(m):
    return str(next(m.parameters()).device)

def extra_device(m):
    return m.extra_device
"""


def _session() -> tuple[InProcessSession, Kernel]:
    session = InProcessSession([(0, NOTEBOOK)])
    session.prepare()
    return session, Kernel(session)


def test_the_profile_op_answers_numbers_never_the_output():
    session, kernel = _session()
    net = kernel.new("Net", 8)
    got = kernel.profile(net, (torch.randn(1, 64, 8),), {}, repeat=3, budget=10.0)
    assert set(got) == {"times", "peak_bytes", "threads"}
    assert len(got["times"]) == 3 and all(t > 0 for t in got["times"])
    assert got["peak_bytes"] >= 64 * 64 * 4  # the [1, 64, 64] output, alive while measured
    with pytest.raises(CandidateRaised, match="raised RuntimeError: too long"):
        kernel.profile(net, (torch.randn(1, 65, 8),), {})


def test_the_shim_moves_arguments_and_built_modules_to_its_device():
    """The same moving code runs for "cpu"; "meta" shows that it moves (no GPU needed):
    arguments arrive on the device, a constructor's stay on the CPU, and the module it
    builds is moved afterwards."""
    session, kernel = _session()
    assert kernel.get("device_of")(torch.zeros(2)) == "cpu"
    session._shim._device["name"] = "meta"
    assert kernel.get("device_of")(torch.zeros(2)) == "meta"
    both = kernel.get("devices")((torch.zeros(1), torch.ones(1)), named={"a": torch.zeros(1)})
    assert both == ["meta", "meta", "meta"]
    net = kernel.new("Net", 4, extra=torch.zeros(1))
    assert kernel.get("extra_device")(net) == "cpu"
    assert kernel.get("param_device")(net) == "meta"


def test_device_tolerances_loosen_float32_on_cuda_and_never_tighten():
    assert checks.tolerance(torch.float32) == checks.Tolerance(rtol=1.3e-6, atol=1e-5)
    with checks.on_device("cuda"):
        assert checks.current_device() == "cuda"
        assert checks.tolerance(torch.float32) == checks.Tolerance(rtol=1e-5, atol=1e-5)
        assert checks.tolerance(torch.float64) == checks.DEFAULT_TOLERANCES[torch.float64]
        assert checks.tolerance(torch.float16) == checks.DEFAULT_TOLERANCES[torch.float16]
        with checks.on_device("cuda:1"):
            assert checks.tolerance(torch.float32, torch.float64).rtol == 1e-5
        assert checks.current_device() == "cuda"
    assert checks.current_device() == "cpu"  # the device before the block is back
    for device, table in checks.DEVICE_TOLERANCES.items():
        for dtype in table:
            default = checks.DEFAULT_TOLERANCES[dtype]
            tol = checks.default_tolerance(dtype, device)
            assert tol.rtol >= default.rtol and tol.atol >= default.atol
    assert checks.tolerance(torch.float32) == checks.Tolerance(rtol=1.3e-6, atol=1e-5)


def test_cuda_available_says_plainly_why_not():
    ok, why = checks.cuda_available()
    if torch.version.cuda is None:
        assert (ok, why) == (False, f"torch {torch.__version__} has no CUDA")
    elif not torch.cuda.is_available():
        assert (ok, why) == (False, "no GPU visible")
    else:
        assert ok and why


def test_an_exercise_without_a_profile_says_so():
    exercise = Exercise(id="plain", title="t", seed="-", levels=["a"], defines=("f",))
    data = run_profile(exercise, Kernel(InProcessSession([])), Limits())
    assert data["rows"] == [] and data["error"] == "exercise plain has no profile"
    assert data["summary"] == ["exercise plain has no profile"]


# -- real kernels --------------------------------------------------------------------------


def _check_profile(profile: dict, lengths=CPU_LENGTHS, weights: bool = True) -> None:
    assert profile["error"] is None
    assert [row["T"] for row in profile["rows"]] == list(lengths)
    for row in profile["rows"]:
        assert row["error"] is None and row["torch_error"] is None, row
        assert row["candidate_ms"] > 0 and row["torch_ms"] > 0
        assert row["candidate_peak_bytes"] > 0 and row["torch_peak_bytes"] > 0
        assert row["candidate_runs"] >= 1 and row["torch_runs"] >= 1
    k = profile["exponents"]
    if weights:  # the [B, H, T, T] weights are returned: memory grows as T^2
        assert 1.5 <= k["candidate_memory"] <= 2.5
        assert 1.5 <= k["torch_memory"] <= 2.5
    # times are fitted, not judged: on a loaded machine a small T can run slower than a
    # larger one, so the sign of a time exponent is not the grader's to promise
    assert all(isinstance(k[t], float) and math.isfinite(k[t]) for t in TIME_EXPONENTS)
    assert any(line.startswith("memory grows as T^") for line in profile["summary"])
    assert any(
        "than torch at T=" in line or "as fast as torch" in line for line in profile["summary"]
    )
    assert len(_panels(profile_svg(profile))) == 2


@pytest.mark.kernel
@pytest.mark.parametrize("exercise", ["mha_module", "mha_causal"])
def test_profile_of_a_solution(exercise):
    report = grade_notebook(SOLUTIONS / f"{exercise}.ipynb", limits=Limits(profile=True))
    assert report.score == report.max_score > 0
    assert report.integrity == [] and report.notes == []  # the profile leaves no trace
    profile = report.profile
    assert profile is not None and profile["device"] == "cpu" and profile["threads"] >= 1
    assert profile["sizes"] == {"B": 1, "E": 64, "H": 4}
    _check_profile(profile)
    if exercise == "mha_module":
        # per-head float32 weights [1, 4, T, T]: at least that much at the longest length
        longest = profile["rows"][-1]
        assert longest["candidate_peak_bytes"] >= 4 * 2048 * 2048 * 4
        assert "per head" in profile["baseline"]
    else:
        assert "causal mask" in profile["baseline"]


def _module_profiled(tmp_path, first_lines: str, call_timeout: float):
    """mha_module's solution with `first_lines` at the top of forward, graded and profiled."""
    solution = nbformat.read(SOLUTIONS / "mha_module.ipynb", as_version=4)
    old = "        Q = self._split_heads(self.W_Q(query))\n"
    path = tmp_path / "profiled.ipynb"
    nbformat.write(apply(solution, Mutant("profiled", old, first_lines + old, "shapes")), path)
    return grade_notebook(path, limits=Limits(profile=True, call_timeout=call_timeout))


@pytest.mark.kernel
def test_a_forward_that_fails_at_long_lengths_gets_rows_saying_so(tmp_path):
    """It raises at T = 512 and hangs from T = 1024: rows say so, T = 2048 is not run, and
    the grade is untouched (the suite's inputs are short)."""
    report = _module_profiled(
        tmp_path,
        "        if query.shape[1] == 512:\n"
        "            raise RuntimeError('sequence too long for this notebook')\n"
        "        if query.shape[1] >= 1024:\n"
        "            import time\n"
        "            time.sleep(60)\n",
        call_timeout=4,
    )
    assert report.score == report.max_score
    rows = {row["T"]: row for row in report.profile["rows"]}
    assert sorted(rows) == list(CPU_LENGTHS)
    for t in (128, 256):
        assert rows[t]["error"] is None and rows[t]["candidate_ms"] > 0
    assert "raised RuntimeError: sequence too long for this notebook" in rows[512]["error"]
    assert rows[1024]["error"] == "timed out (its runs took past the 4 s call limit)"
    assert rows[2048]["error"] == "not run: T=1024 timed out"
    for t in (512, 1024, 2048):
        assert rows[t]["candidate_ms"] is None and rows[t]["torch_ms"] > 0
    assert any(line.startswith("forward did not run at T=512, 1024, 2048") for line in
               report.profile["summary"])  # fmt: skip
    console = Console(file=io.StringIO(), width=160, color_system=None)
    render_profile(report.profile, console)
    assert "T=1024: timed out" in console.file.getvalue()


@pytest.mark.kernel
def test_a_forward_that_fakes_its_speed_is_not_timed_and_the_grading_goes_on(tmp_path):
    """At the profile's sizes it returns `empty_like` at once (no attention computed): the
    output is checked before it is timed, so no ratio is reported, and the candidate's
    fault never becomes the grader's (no exit 3, no ZeroDivisionError)."""
    report = _module_profiled(
        tmp_path,
        "        if query.shape[1] >= 128:\n            return torch.empty_like(query), None\n",
        call_timeout=10,
    )
    assert report.score == report.max_score
    rows = report.profile["rows"]
    assert rows[0]["error"].startswith("not timed: wrong output at T=128")
    assert all(row["time_ratio"] is None and row["candidate_ms"] is None for row in rows)
    assert not any("faster" in line for line in report.profile["summary"])


@pytest.mark.kernel
def test_device_cpu_explicitly_grades_the_solution_at_full_marks():
    report = grade_notebook(SOLUTIONS / "mha_parity.ipynb", limits=Limits(device="cpu"))
    assert report.score == report.max_score > 0
    assert report.profile is None
    assert checks.current_device() == "cpu"


@pytest.mark.kernel
@CUDA
def test_device_cuda_grades_the_solution_at_full_marks_and_profiles_on_the_gpu():
    report = grade_notebook(
        SOLUTIONS / "mha_module.ipynb", limits=Limits(device="cuda", profile=True)
    )
    assert [(t.id, t.message) for t in report.tests if t.status != "passed"] == []
    assert report.profile["device"] == "cuda"
    _check_profile(report.profile, CUDA_LENGTHS)


@pytest.mark.kernel
@CUDA
@pytest.mark.parametrize("exercise", ["mha_interview", "mha_parity", "mha_selfattn", "mha_causal"])
def test_device_cuda_grades_every_solution_at_full_marks(exercise):
    report = grade_notebook(SOLUTIONS / f"{exercise}.ipynb", limits=Limits(device="cuda"))
    assert [(t.id, t.message) for t in report.tests if t.status != "passed"] == []
