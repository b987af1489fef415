"""The kernel-side guard: what it records, what it refuses, and what the grader makes of it.

The record format and the environment checks are tested without a kernel; the guard itself
only in real kernels, through `Session` (a notebook's cells, then one hidden call).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from grader.core.limits import Limits
from grader.core.records import Finding, RecordReader, cell_file_names
from grader.exercises._attention import ATTENTION
from grader.kernel import Session
from grader.kernel.launch import environment_changes, grader_folders
from grader.kernel.sandbox import kernel_path
from grader.suite.exercise import Watch
from grader.suite.handle import Kernel

ROOT = Path(__file__).resolve().parent.parent


def line(kind: str, message: str, file: str = "", lineno: int = 0) -> bytes:
    return (json.dumps({"k": kind, "m": message, "f": file, "l": lineno}) + "\n").encode()


# -- records, without a kernel ------------------------------------------------------------


def test_records_name_the_cell_and_line_among_all_cells():
    cells = [(0, "import torch"), (2, "def f():\n    return 1")]
    name = next(n for n, number in cell_file_names(cells).items() if number == 3)
    reader = RecordReader(cells)
    reader.feed(line("builtin", "scaled_dot_product_attention", f"/tmp/ipykernel_9/{name}", 2))
    assert reader.findings == []  # the notebook's own cells, before the hidden tests
    reader.testing = True
    reader.feed(line("builtin", "scaled_dot_product_attention", f"/tmp/ipykernel_9/{name}", 2))
    assert reader.findings == [Finding("builtin", "scaled_dot_product_attention", 3, 2)]
    assert reader.seen == {"scaled_dot_product_attention"}


def test_records_split_across_reads_are_joined():
    reader = RecordReader([])
    data = line("machinery", "gc.get_objects() walks the interpreter's objects")
    reader.feed(data[:7])
    assert reader.findings == []
    reader.feed(data[7:])
    assert [f.kind for f in reader.findings] == ["machinery"]


def test_forged_or_garbled_records_are_tampering():
    reader = RecordReader([])
    reader.feed(b"not json\n" + line("made-up-kind", "x") + b"x" * 5000)
    assert {f.kind for f in reader.findings} == {"tamper"}


def test_pid_records_are_not_findings():
    reader = RecordReader([])
    reader.feed(line("pid", "42") + line("pid", "oops"))
    assert reader.pids == [42] and reader.findings == []


def test_a_record_from_a_file_the_notebook_wrote_names_the_file():
    reader = RecordReader([(0, "x = 1")])
    reader.testing = True
    reader.feed(line("builtin", "multi_head_attention_forward", "/tmp/g/work/helper.py", 3))
    [finding] = reader.findings
    assert finding.cell is None and "helper.py" in finding.message


def test_environment_changes_are_named():
    before = {"/sp/torch": 1, "/sp/numpy": 1}
    after = {"/sp/torch": 2, "/sp/numpy": 1, "/sp/evil.pth": 1}
    assert environment_changes(before, after) == "added evil.pth; changed torch"
    assert environment_changes(before, before) == ""


def test_kernel_path_holds_only_the_interpreters_folders(monkeypatch):
    monkeypatch.setattr(sys, "path", [*sys.path, "/somewhere/a/pth/file/added"])
    path = kernel_path()
    assert "/somewhere/a/pth/file/added" not in path
    assert any(p.endswith("site-packages") for p in path)


def test_grader_folders_cover_the_package_suites_and_solutions():
    folders = {str(f) for f in grader_folders()}
    assert str(ROOT / "grader") in folders
    assert str(ROOT / "exercises") in folders
    assert str(ROOT / "solutions") in folders


# -- the guard in a real kernel ----------------------------------------------------------


def run(
    *cells: str, sandbox: bool = False, call: str | None = None, watch: Watch = ATTENTION
) -> tuple[Session, object]:
    """Run the cells in a fresh kernel watching `watch`, then call the notebook's function
    `call`."""
    sources = list(enumerate(cells))
    with Session(sources, Limits(cell_timeout=20, call_timeout=20, sandbox=sandbox)) as session:
        session.prepare(watch.kernel_config())
        answer = Kernel(session).get(call)() if call else None
        session.findings  # noqa: B018 (read while the kernel is alive)
    return session, answer


def kinds(session: Session) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for f in session.findings:
        found.setdefault(f.kind, []).append(f.message)
    return found


@pytest.mark.kernel
def test_the_grader_package_cannot_be_imported_or_read_from_the_kernel():
    session, _ = run(
        "try:\n    import grader.exercises.mha_interview.suite\nexcept ImportError as e:\n    print(e)",
        f"try:\n    open({str(ROOT / 'exercises' / '_attention.py')!r}).read()\n"
        "except PermissionError as e:\n    print(e)",
        f"import os\ntry:\n    os.listdir({str(ROOT / 'solutions')!r})\nexcept PermissionError as e:\n    print(e)",
    )
    assert all("not allowed while the notebook is graded" in c.output for c in session.cells)
    hidden = [f for f in session.findings if f.kind == "hidden"]
    assert [(f.cell, f.line) for f in hidden] == [(1, 2), (2, 2), (3, 3)], hidden


@pytest.mark.kernel
def test_a_builtin_run_from_another_thread_is_seen():
    session, answer = run(
        "import threading, torch\nimport torch.nn.functional as F\n"
        "def f():\n    q = torch.randn(1, 2, 3, 4)\n    out = []\n"
        "    t = threading.Thread(target=lambda: out.append(F.scaled_dot_product_attention(q, q, q)))\n"
        "    t.start(); t.join()\n    return out[0]",
        call="f",
    )
    assert answer.shape == (1, 2, 3, 4)
    assert "scaled_dot_product_attention" in session.seen
    assert "started a thread during a hidden test" in kinds(session)["note"]


@pytest.mark.kernel
def test_a_pattern_matching_ops_the_dispatcher_lacks_still_watches_the_others():
    """Python lists overloads of aten::dequantize (tensor, list, any) that the dispatcher
    has no entry for: the watch skips them, and still sees the op from a worker thread."""
    watch = Watch(what="quantization", dispatch_pattern="quantize")
    session, answer = run(
        "import threading, torch\n"
        "def f():\n    out = []\n"
        "    q = torch.quantize_per_tensor(torch.ones(3), 0.5, 0, torch.qint8)\n"
        "    t = threading.Thread(target=lambda: out.append(q.dequantize()))\n"
        "    t.start(); t.join()\n    return out[0]",
        call="f",
        watch=watch,
    )
    assert answer.tolist() == [1.0, 1.0, 1.0]
    assert "dequantize" in session.seen


@pytest.mark.kernel
def test_nn_multihead_attention_hidden_in_a_closure_is_seen_from_a_worker_thread():
    session, _ = run(
        "import torch, queue, threading\n"
        "jobs, done = queue.Queue(), queue.Queue()\n"
        "def worker(mha=torch.nn.MultiheadAttention(8, 2, batch_first=True)):\n"
        "    while True:\n        x = jobs.get()\n        done.put(mha(x, x, x)[0])\n"
        "threading.Thread(target=worker, daemon=True).start()\n"
        "def f():\n    jobs.put(torch.randn(1, 3, 8))\n    return done.get()",
        call="f",
    )
    assert {"MultiheadAttention.forward", "multi_head_attention_forward"} <= session.seen


# Torch's attention by every route: the private and composite ops behind the public one,
# reached by names the source scan cannot read, on threads a stdlib helper started, in
# inference mode, at a named dispatch key. Each must be seen during the graded call.
PRIVATE_ROUTES = {
    "math_op_with_grad": (
        "import inspect, torch\n_math = inspect.getattr_static(torch, '_scaled_dot_' + 'product_attention_math')\n"
        "def f():\n    q = torch.randn(1, 2, 3, 4, requires_grad=True)\n    return _math(q, q, q)[0].detach()",
        "_scaled_dot_product_attention_math",
    ),
    "fused_cpu_kernel_on_a_pool_thread": (
        "import torch\nfrom concurrent.futures import ThreadPoolExecutor\n_pool = ThreadPoolExecutor(1)\n"
        "_pool.submit(int).result()\n_flash = getattr(torch, '_scaled_dot_product_flash_' + 'attention_for_cpu')\n"
        "def f():\n    q = torch.randn(1, 2, 3, 4)\n    return _pool.submit(lambda: _flash(q, q, q)[0]).result()",
        "_scaled_dot_product_flash_attention_for_cpu",
    ),
    "inference_mode": (
        "import torch\nimport torch.nn.functional as F\n_f = vars(F)['scaled_dot_product_' + 'attention']\n"
        "def f():\n    with torch.inference_mode():\n        q = torch.randn(1, 2, 3, 4)\n"
        "        return _f(q, q, q).clone()",
        "_scaled_dot_product_flash_attention_for_cpu",
    ),
    "named_dispatch_key": (
        "import torch\nfrom torch._C import DispatchKey\n"
        "_op = getattr(torch.ops.aten, '_scaled_dot_product_flash_' + 'attention_for_cpu').default\n"
        "def f():\n    q = torch.randn(1, 2, 3, 4)\n    return _op._op_dk(DispatchKey.CPU, q, q, q)[0]",
        "_scaled_dot_product_flash_attention_for_cpu",
    ),
    "higher_order_op_on_a_thread": (  # flex_attention is no aten op: its kernels are watched
        "import torch, threading\nfrom torch.nn.attention.flex_attention import flex_attention\n"
        "def f():\n    q = torch.randn(1, 2, 3, 4)\n    out = []\n"
        "    t = threading.Thread(target=lambda: out.append(flex_attention(q, q, q)))\n"
        "    t.start(); t.join()\n    return out[0]",
        "flex_attention",
    ),
    "fresh_operation_overload": (
        "import torch\nfrom torch._C import DispatchKey\n"
        "_op, _dk, _ = torch._C._get_operation_overload('aten::_scaled_dot_product_attention_math', '')\n"
        "def f():\n    q = torch.randn(1, 2, 3, 4)\n    return _dk(DispatchKey.CompositeImplicitAutograd, q, q, q)[0]",
        "_scaled_dot_product_attention_math",
    ),
}


@pytest.mark.kernel
@pytest.mark.parametrize("route", sorted(PRIVATE_ROUTES))
def test_torchs_attention_is_seen_by_every_route(route):
    cell, op = PRIVATE_ROUTES[route]
    session, answer = run(cell, call="f")
    assert answer is not None and tuple(answer.shape) == (1, 2, 3, 4), answer
    assert op in session.seen, kinds(session)


@pytest.mark.kernel
def test_a_self_check_against_the_builtin_in_a_cell_is_not_seen():
    """Sightings are placed by when they arrive: the cells' own come before the tests."""
    session, _ = run(
        "import torch\nimport torch.nn.functional as F\nq = torch.randn(1, 2, 3, 4)\n"
        "for _ in range(3):\n    F.scaled_dot_product_attention(q, q, q)\n"
        "def g(q):\n    return F.scaled_dot_product_attention(q, q, q)\ng(q)\n"
        "def f():\n    return q.sum()",
        call="f",
    )
    assert session.findings == [] and not Kernel(session).seen


# A program that works for the graded calls: its CPU time while they run is evidence,
# however it was started; one that sits idle is a note.
SERVER = (
    "import subprocess, sys\n"
    "server = subprocess.Popen([sys.executable, '-c', 'import sys\\n"
    "for line in sys.stdin:\\n    n = sum(i * i for i in range(400000))\\n"
    "    print(n, flush=True)'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)\n"
    "def f():\n    for _ in range(5):\n        server.stdin.write('go\\n'); server.stdin.flush()\n"
    "        server.stdout.readline()\n    return 1"
)


@pytest.mark.kernel
def test_a_program_that_works_while_the_graded_calls_run_is_evidence():
    session, _ = run(SERVER, call="f")
    machinery = kinds(session).get("machinery", [])
    assert any("s of CPU while the hidden tests ran" in m for m in machinery), kinds(session)
    assert any("started a program" in m for m in kinds(session)["note"])


@pytest.mark.kernel
def test_an_idle_program_and_a_shell_command_are_notes():
    session, _ = run(
        "import subprocess\nsleeper = subprocess.Popen(['sleep', '600'])",
        "import os\nos.system('true')",
        "import threading\nthreading.Thread(target=lambda: None).start()",
        "def f():\n    print('x' * 1_000_000)\n    return 1",
        call="f",
    )
    found = kinds(session)
    assert set(found) == {"note"}, found
    assert "started a program: sleep 600" in found["note"]
    assert "ran a shell command: true" in found["note"]
    assert not Kernel(session).seen


@pytest.mark.kernel
def test_a_program_started_by_a_graded_call_is_evidence():
    session, _ = run(
        "import subprocess\ndef f():\n    return subprocess.run(['true']).returncode", call="f"
    )
    assert any("during a hidden test: true" in m for m in kinds(session)["machinery"])


@pytest.mark.kernel
def test_a_check_cell_using_the_builtin_is_not_a_use_by_the_graded_code():
    session, _ = run(
        "import torch\nref = torch.nn.MultiheadAttention(8, 2)\nx = torch.randn(3, 1, 8)\n"
        "y, _ = ref(x, x, x)\nimport torch.nn.functional as F\n"
        "F.scaled_dot_product_attention(x[None], x[None], x[None])\ndef f():\n    return x.sum()",
        call="f",
    )
    assert session.findings == []


@pytest.mark.kernel
def test_emptying_the_watch_through_frames_or_gc_is_caught():
    session, _ = run(
        "import gc\ntry:\n    gc.get_referrers(print)\nexcept RuntimeError as e:\n    print(e)",
        "import sys, torch\nimport torch.nn.functional as F\n"
        "def f():\n    frame = sys._getframe(1)\n"
        "    while frame is not None and '_state' not in frame.f_locals:\n        frame = frame.f_back\n"
        "    frame.f_locals['_state']['active'] = False\n"
        "    q = torch.randn(1, 2, 3, 4)\n    return F.scaled_dot_product_attention(q, q, q)",
        call="f",
    )
    machinery = kinds(session)["machinery"]
    assert any("gc.get_referrers" in m for m in machinery)
    assert any("interpreter frames" in m for m in machinery)


@pytest.mark.kernel
def test_registering_operator_kernels_from_the_notebook_is_machinery():
    session, _ = run("import torch\nlib = torch.library.Library('aten', 'IMPL')")
    assert kinds(session)["machinery"] == ["torch.library: registers kernels"]
    assert session.findings[0].cell == 1 and session.findings[0].line == 2


@pytest.mark.kernel
def test_redirecting_the_record_channel_is_tampering():
    session, _ = run(
        "import os, stat\nnull = os.open('/dev/null', os.O_WRONLY)\n"
        "for fd in range(3, 1024):\n    try:\n"
        "        if stat.S_ISFIFO(os.fstat(fd).st_mode):\n            os.dup2(null, fd)\n"
        "    except OSError:\n        pass",
    )
    assert "tamper" in kinds(session)
    tampered = " ".join(kinds(session)["tamper"])
    assert "record channel" in tampered and "call channel" in tampered, tampered


@pytest.mark.kernel
def test_the_environment_is_read_only_and_limited_to_what_is_declared():
    session, _ = run(
        "import site, sys\ntarget = site.getsitepackages()[0] + '/planted.pth'\n"
        "try:\n    open(target, 'w').write('import os')\nexcept PermissionError as e:\n    print(e)",
        "try:\n    import sympy\nexcept ImportError as e:\n    print(e)",
        "import numpy, einops, math, json",
    )
    assert [c.status for c in session.cells] == ["passed", "passed", "passed"]
    assert "read-only" in session.cells[0].output
    assert "not available in the grading environment" in session.cells[1].output
    assert len(kinds(session)["environment"]) == 2


@pytest.mark.kernel
def test_a_module_the_notebook_writes_in_its_folder_imports_as_usual():
    session, _ = run("open('helper.py', 'w').write('X = 41')\nimport helper\nprint(helper.X + 1)")
    assert session.cells[0].status == "passed" and "42" in session.cells[0].output
    assert session.findings == []


@pytest.mark.kernel
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_the_sandbox_shows_the_grader_s_folders_empty():
    folders = [str(f) for f in grader_folders()]
    session, _ = run(
        "import subprocess\n"
        f"for folder in {folders!r}:\n"
        "    print(folder, len(subprocess.run(['ls', '-A', folder], capture_output=True, text=True).stdout))",
        sandbox=True,
    )
    output = session.cells[0].output
    assert output.count(" 0\n") == len(folders), output


# -- a fixed grading environment, through the CLI ----------------------------------------

BUILD_WHEEL = """
import base64, hashlib, zipfile
files = {
    "gradetestpkg.py": "VALUE = 1\\n",
    "gradetestpkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\\nName: gradetestpkg\\nVersion: 1.0\\n",
    "gradetestpkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
}
def digest(text):
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).decode().rstrip("=")
record = "".join(f"{name},sha256={digest(text)},{len(text)}\\n" for name, text in files.items())
with zipfile.ZipFile("gradetestpkg-1.0-py3-none-any.whl", "w") as wheel:
    for name, text in files.items():
        wheel.writestr(name, text)
    wheel.writestr("gradetestpkg-1.0.dist-info/RECORD", record + "gradetestpkg-1.0.dist-info/RECORD,,\\n")
"""

MUTATIONS = (
    BUILD_WHEEL,
    "!pip install --no-index gradetestpkg-1.0-py3-none-any.whl",
    "%pip install --no-index --force-reinstall gradetestpkg-1.0-py3-none-any.whl",
    "import os, pwd, site\n"
    "for folder in [*site.getsitepackages(), os.path.join(pwd.getpwuid(os.getuid()).pw_dir,"
    " '.local/lib/python3.11/site-packages')]:\n"
    "    for name, text in [('gradetestpkg.py', 'VALUE = 2'), ('gradetestpkg.pth', 'import os')]:\n"
    "        try:\n            open(os.path.join(folder, name), 'w').write(text)\n"
    "        except OSError as e:\n            print(e)",
)


def site_listing() -> set[str]:
    import site

    return {str(p) for folder in site.getsitepackages() for p in Path(folder).iterdir()}


@pytest.mark.kernel
def test_a_notebook_cannot_change_what_a_later_grading_sees(tmp_path):
    import nbformat

    from tests.helpers import SOLUTIONS, grade

    def notebook(name: str, *cells: str) -> Path:
        nb = nbformat.read(SOLUTIONS / "mha_interview.ipynb", as_version=4)
        nb.cells += [nbformat.v4.new_code_cell(c) for c in cells]
        path = tmp_path / f"{name}.ipynb"
        nbformat.write(nb, path)
        return path

    def verdict(report: dict) -> tuple:
        statuses = tuple((t["id"], t["status"]) for t in report["tests"])
        return report["score"], statuses, tuple(report["headlines"])

    clean = notebook("clean", "import gradetestpkg")
    before = site_listing()
    first = grade(clean).report
    mutating = grade(notebook("mutating", *MUTATIONS, "import gradetestpkg")).report
    third = grade(clean).report
    assert site_listing() == before
    assert verdict(first) == verdict(third)
    assert first["headlines"] == [
        "cell 8: `gradetestpkg` is not available in the grading environment"
    ]
    refused = [f["message"] for f in mutating["integrity"] if f["kind"] == "environment"]
    assert len(refused) >= 2 and all("read-only" in m or "not in" in m for m in refused), refused
