"""Kernels forked from the warm template: each grading still starts from a pristine kernel.

One worker grades a notebook that changes everything it can reach (torch's globals,
`sys.modules`, the environment, files, the random streams) and hunts for the template,
then a probe notebook that reports what it finds; both kernels come from the same
template. Every property is checked with and without the sandbox. The template's failure
is a cold start, not a failed grading.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path

import nbformat
import pytest

from grader.core.limits import Limits
from grader.kernel import template
from grader.run.batch import grade_all
from grader.run.catalog import load_catalog
from grader.run.pipeline import grade_file
from tests.helpers import SOLUTIONS

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="forked kernels need bubblewrap"),
]

TAMPER = r"""
import json, os, socket, sys, glob
import numpy, torch
report = {"draw": torch.rand(3).tolist(), "numpy": numpy.random.rand(2).tolist()}
torch.set_default_dtype(torch.float64)
torch.manual_seed(1234)
torch.set_num_threads(1)
torch.nn.functional.softmax = lambda *a, **k: "tampered"
sys.modules["einops"] = type(sys)("einops")
os.environ["GRADER_TAMPERED"] = "1"
for folder in (os.path.expanduser("~"), "/tmp", os.getcwd()):
    try:
        open(os.path.join(folder, "planted.txt"), "w").write("x")
    except OSError:
        pass
# the template: its process, its socket
names = []
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            names.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode())
        except OSError:
            pass
report["template_seen"] = any("zygote" in n or "warm template" in n for n in names)
report["others"] = len(names)
answers = []
for path in glob.glob("/tmp/grader-template-*/t"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(path)
        s.send(json.dumps({"join": 1, "cwd": "/", "env": {}, "fd_targets": [], "argv": [],
                           "address_space": 0, "hangup_fd": -1, "cgroup_procs": ""}).encode())
        s.settimeout(2)
        answers.append(s.recv(4096).decode() or "closed")
    except OSError as e:
        answers.append(type(e).__name__)
report["socket_answers"] = answers
print("REPORT" + json.dumps(report))
"""

PROBE = r"""
import json, os, sys
import numpy, torch
print("REPORT" + json.dumps({
    "draw": torch.rand(3).tolist(),
    "numpy": numpy.random.rand(2).tolist(),
    "dtype": str(torch.get_default_dtype()),
    "softmax": getattr(torch.nn.functional.softmax, "__name__", "?"),
    "threads": torch.get_num_threads(),
    "einops": "einops" in sys.modules,
    "tampered": os.environ.get("GRADER_TAMPERED"),
    "planted": [os.path.exists(os.path.join(f, "planted.txt"))
                for f in (os.path.expanduser("~"), "/tmp", os.getcwd())],
    "forked": "warm template" in open("/proc/self/cmdline").read(),
}))
"""


def notebook_with(folder: Path, name: str, cell: str) -> str:
    nb = nbformat.read(SOLUTIONS / "mha_interview.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(cell))
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return str(path)


def reports(outcome) -> dict:
    for cell in outcome.cells:
        if "REPORT" in cell.output:
            return json.loads(cell.output.split("REPORT", 1)[1].splitlines()[0])
    raise AssertionError(f"no report in {outcome.notebook}: {outcome.cells}")


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.mark.parametrize("sandbox", [True, False], ids=["sandbox", "no-sandbox"])
def test_a_tampering_notebook_leaves_the_next_kernel_pristine(tmp_path, catalog, sandbox):
    paths = [
        notebook_with(tmp_path, "a-tamper", TAMPER),
        notebook_with(tmp_path, "b-probe", PROBE),
        notebook_with(tmp_path, "c-probe", PROBE),
    ]
    try:  # one worker, so one template
        outcomes = grade_all(paths, 1, Limits(sandbox=sandbox), catalog)
    finally:
        if not sandbox:  # the host's /tmp: what any kernel without the sandbox can write
            Path("/tmp/planted.txt").unlink(missing_ok=True)
    for outcome in outcomes[1:]:  # the tamperer broke its own torch: its marks are its own
        assert outcome.report is not None, outcome.error
        assert outcome.report.score == outcome.report.max_score, outcome.notebook
    tamper, first, second = (reports(o) for o in outcomes)
    for probe in (first, second):
        assert probe["forked"], "the kernel was not forked from the template"
        assert probe["dtype"] == "torch.float32"
        assert probe["softmax"] == "softmax"
        assert probe["threads"] == torch_threads()
        assert not probe["einops"]
        assert probe["tampered"] is None
        assert probe["planted"] == ([False, False, False] if sandbox else [False, True, False])
    # the grader seeds torch before the cells, in every kernel (the tamperer's seed did not
    # stay); numpy's stream is fresh in every kernel, as in cold ones
    assert first["draw"] == second["draw"] == tamper["draw"]
    assert len({json.dumps(r["numpy"]) for r in (tamper, first, second)}) == 3
    # the template is out of sight and out of reach
    assert not tamper["template_seen"]
    assert all("pid" not in answer for answer in tamper["socket_answers"])
    if sandbox:
        assert tamper["socket_answers"] == []  # not even in the sandbox's view


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def test_cold_is_a_fresh_interpreter(tmp_path, catalog):
    path = notebook_with(tmp_path, "probe", PROBE)
    graded = grade_file(path, limits=Limits(warm=False), catalog=catalog)
    assert graded.report.score == graded.report.max_score
    probe = reports(_as_outcome(graded))
    assert not probe["forked"]


@pytest.fixture
def own_template(monkeypatch):
    """This process gets a template of its own for the test (the run's shared one, which
    tests/conftest.py started, is set aside and given back)."""
    monkeypatch.delenv(template.SHARE_VARIABLE, raising=False)
    shared = template._templates.pop(os.getpid(), None)
    try:
        yield
    finally:
        template.close_all()
        if shared is not None:
            template._templates[os.getpid()] = shared


def test_a_dead_template_means_a_cold_start_not_a_failed_grading(
    tmp_path, catalog, caplog, own_template
):
    path = notebook_with(tmp_path, "probe", PROBE)
    first = grade_file(path, catalog=catalog)
    assert reports(_as_outcome(first))["forked"]
    warm = template.for_this_process(template_environment(), template_key())
    assert warm.pid is not None
    os.kill(warm.pid, signal.SIGKILL)
    caplog.set_level("INFO", logger="grader.kernel")
    second = grade_file(path, catalog=catalog)
    assert second.report.score == second.report.max_score
    assert not reports(_as_outcome(second))["forked"]
    assert any("starts cold" in r.getMessage() for r in caplog.records)


def template_environment() -> dict[str, str]:
    from grader.kernel.launch import template_environment

    return template_environment()


def template_key() -> str:
    from grader.kernel.launch import template_key

    return template_key()


def _as_outcome(graded):
    from grader.core.results import Outcome

    return Outcome(graded.report.notebook, graded.report, cells=tuple(graded.cells))


def _killed_at_launch(session, monkeypatch, times: int) -> list[int]:
    """Kill the session's next `times` kernels the moment they are launched, before they
    are asked anything; the pids killed."""
    launch, killed = session._launch, []

    def launch_and_kill() -> None:
        launch()
        if len(killed) < times:
            killed.append(session._process.pid)
            os.kill(killed[-1], signal.SIGKILL)

    monkeypatch.setattr(session, "_launch", launch_and_kill)
    return killed


@pytest.mark.parametrize("warm", [True, False], ids=["forked", "cold"])
def test_a_kernel_that_dies_before_it_answers_is_replaced(warm, caplog, monkeypatch):
    """Nothing of the notebook has run in a kernel that dies before its first answer: the
    session starts another in its place, the cells run there, and the log says how the
    first one ended (a forked kernel's keeper reports it; a cold one is our child)."""
    from grader.core.outcomes import Status
    from grader.kernel.session import Session

    caplog.set_level("INFO", logger="grader.kernel")
    session = Session([(0, "x = 6 * 7"), (1, "assert x == 42")], Limits(warm=warm))
    killed = _killed_at_launch(session, monkeypatch, times=1)
    with session:
        session.prepare()
        assert session.start_retries == 1
        assert session.restarts == 0
        assert [cell.status for cell in session.cells] == [Status.PASSED, Status.PASSED]
        assert session._process is not None and session._process.pid not in killed
    said = [r.getMessage() for r in caplog.records]
    assert "it was killed by SIGKILL before it answered; starting another" in said, said


def test_a_kernel_that_dies_at_start_twice_in_a_row_is_a_start_error(monkeypatch):
    """Once is a mishap; the second death in a row ends the grading with a one-line error
    that says how the kernel ended."""
    from grader.core.errors import KernelStartError
    from grader.kernel.session import Session

    session = Session([(0, "x = 1")], Limits())
    _killed_at_launch(session, monkeypatch, times=2)
    with session, pytest.raises(KernelStartError) as raised:
        session.prepare()
    assert str(raised.value) == (
        "could not start the kernel: it was killed by SIGKILL before it answered, twice in a row"
    )
    assert session.start_retries == 1


def test_the_exception_that_ends_a_forked_kernels_start_is_told(monkeypatch):
    """A forked kernel whose ipykernel raises before it answers: its stderr goes nowhere,
    so its keeper passes on its last words, and the error names the exception and where
    it was raised (here: a connection file in a folder that cannot be made)."""
    import dataclasses

    from grader.core.errors import KernelStartError
    from grader.kernel import template
    from grader.kernel.session import Session

    fork = template.fork_kernel

    def fork_with_a_connection_file_it_cannot_write(plan, options):
        argv = list(plan.kernel_argv)
        argv[argv.index("-f") + 1] = "/proc/none/kernel.json"
        return fork(dataclasses.replace(plan, kernel_argv=argv), options)

    monkeypatch.setattr(template, "fork_kernel", fork_with_a_connection_file_it_cannot_write)
    session = Session([(0, "x = 1")], Limits())
    with session, pytest.raises(KernelStartError) as raised:
        session.prepare()
    message = str(raised.value)
    assert message.startswith("could not start the kernel: it exited with code 70 ("), message
    assert "Error at " in message and "'/proc/none'" in message, message
    assert message.endswith(") before it answered, twice in a row"), message


def test_the_template_stops_when_its_grader_dies(tmp_path):
    """A grader killed outright (SIGKILL, no clean-up) leaves no template behind: the
    template watches the pipe only its grader holds."""
    import subprocess
    import time

    code = (
        "from grader.kernel.launch import template_environment, template_key\n"
        "from grader.kernel import template\n"
        "t = template.for_this_process(template_environment(), template_key())\n"
        "t.wait_ready(60)\n"
        "print(t.pid, t.folder, flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != template.SHARE_VARIABLE}
    grader = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    assert grader.stdout is not None
    pid, folder = grader.stdout.readline().split()
    grader.kill()
    grader.wait()
    grader.stdout.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        status = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        if status == "Z":
            break
        time.sleep(0.05)
    else:
        assert not Path(f"/proc/{pid}").exists(), "the template outlived its grader"
    assert not Path(folder).exists()


def test_the_placeholder_ends_with_its_grader_whatever_bubblewrap_missed():
    """bubblewrap's --die-with-parent misses a grader killed before bubblewrap asks for the
    signal (likely on a loaded machine); the placeholder itself waits for its stdin, whose
    other end only the grader holds, so it ends with the grader (and a forked kernel's PID
    namespace with it). Here without bubblewrap at all."""
    import subprocess
    import time

    code = (
        "import subprocess, time\n"
        "from grader.kernel.template import PLACEHOLDER\n"
        "p = subprocess.Popen(PLACEHOLDER, stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        "print(p.pid, p.stdout.readline().decode().strip(), flush=True)\n"
        "time.sleep(60)\n"
    )
    grader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert grader.stdout is not None
    pid, said = grader.stdout.readline().split()
    assert said == "ready"
    grader.kill()
    grader.wait()
    grader.stdout.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            break
        time.sleep(0.05)
    else:
        assert not Path(f"/proc/{pid}").exists(), "the placeholder outlived its grader"


PLACE_FDS = """
import os, sys
sys.path.insert(0, sys.argv[1])
from grader.kernel.zygote import _place_fds
pipes = [os.pipe() for _ in range(6)]
received = [w for _, w in pipes[3:]]  # where the template got them
holes = sorted(fd for pair in pipes[:2] for fd in pair)[:3]
for fd in (fd for pair in pipes[:3] for fd in pair):
    os.close(fd)  # free low numbers, as a kernel's own fd table has
targets = [holes[1], holes[0], holes[2]]  # a naive dup lands on another's target
status_r, status_w = os.pipe()  # the kernel's own pipe, on numbers the grader's need
assert {status_r, status_w} & set(targets)
os.close(status_r)
inodes = [os.fstat(fd).st_ino for fd in received]
status = os.fstat(status_w).st_ino
[kept] = _place_fds(received, targets, keep=(status_w,))
print([os.fstat(t).st_ino for t in targets] == inodes, os.fstat(kept).st_ino == status)
listed = [int(f) for f in os.listdir("/proc/self/fd")]
still = [f for f in listed if f > 2 and os.path.exists(f"/proc/self/fd/{f}")]  # not listdir's
print(sorted(still) == sorted([*targets, kept]))
"""


def test_passed_descriptors_land_at_their_numbers_whatever_is_open_there():
    """The grader's pipes keep their numbers in a forked kernel even where those numbers
    are taken in the template's child (a batch's first kernel met this), the kernel's own
    status pipe stays open wherever it was (a grader with fewer descriptors of its own, one
    that uses a shared template, met this), and nothing else stays open."""
    import subprocess

    root = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run(
        [sys.executable, "-c", PLACE_FDS, root], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["True", "True", "True"], done.stderr


def _grade_verbose(*args: str, env: dict[str, str] | None = None) -> str:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", *args, "--json", "-v"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_grade_forks_from_the_template_its_parent_shares(tmp_path):
    """The run's shared template (tests/conftest.py) serves the `grade` commands a test
    starts; one whose kernels would be passed other variables, or a batch (whose workers
    the shared template would not serve), starts its own."""
    if not os.environ.get(template.SHARE_VARIABLE):
        pytest.skip("kernels start cold here: there is no template to share")
    solution = str(SOLUTIONS / "mha_interview.ipynb")
    shared = f"kernel forked from the warm template shared by process {os.getpid()} in"
    assert shared in _grade_verbose(solution)
    other = _grade_verbose(solution, env={**os.environ, "LC_GRADER_TEST": "other"})
    assert "warm template ready" in other and "shared by" not in other, other
    copies = [tmp_path / "a.ipynb", tmp_path / "b.ipynb"]
    for copy in copies:
        copy.write_bytes((SOLUTIONS / "mha_interview.ipynb").read_bytes())
    batch = _grade_verbose(*map(str, copies), "-j", "2")
    assert batch.count("kernel forked from the warm template in") == 2, batch


def test_a_shared_template_is_used_only_from_a_private_folder(tmp_path, monkeypatch):
    """A listener in a folder others can enter is not taken for a template (anyone could
    have put it there); in a folder only our user can enter, it is."""
    import socket

    from grader.kernel.launch import template_key

    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    address = str(folder / "t")
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
        listener.bind(address)
        listener.listen()
        monkeypatch.setenv(template.SHARE_VARIABLE, f"{template_key()} {address}")
        assert template._borrow(template_key()) is None
        folder.chmod(0o700)
        borrowed = template._borrow(template_key())
        assert borrowed is not None and borrowed.borrowed and borrowed.pid == os.getpid()
        assert template._borrow("another key") is None
