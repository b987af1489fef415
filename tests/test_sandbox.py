"""--sandbox: the kernel cannot reach the network, see the grader, write the host's /tmp, or
read the home folder.

Each property is checked twice: under --sandbox (blocked) and without it (the same cell
gets through), so the test proves the sandbox is what blocks it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import nbformat
import pytest

from tests.helpers import SOLUTIONS, Batch, Graded

CHECKOUT = SOLUTIONS.parent

pytestmark = pytest.mark.kernel
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed"
)


def graded_with(
    tmp_path: Path, cell: str, *flags: str, env: dict[str, str] | None = None
) -> Graded:
    nb = nbformat.read(SOLUTIONS / "mha_interview.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(cell))
    path = tmp_path / f"nb-{uuid.uuid4().hex[:6]}.ipynb"
    nbformat.write(nb, path)
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", str(path), "--json", *flags],
        capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})},
    )  # fmt: skip
    return Graded(done.returncode, done.stdout, done.stderr)


def cell_errors(graded: Graded) -> list[str]:
    return [e["message"] for e in graded.report["cell_errors"]]


def write_probe(path: Path, cell: str) -> Path:
    nb = nbformat.read(SOLUTIONS / "mha_interview.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(cell))
    nbformat.write(nb, path)
    return path


class Probes:
    """The probes that need no flag or environment of their own, each appended to the
    solution and graded twice, in the background from the end of collection
    (tests/conftest.py): in one batch with the default flags (the sandbox) and in one with
    --no-sandbox, side by side. What a probe reaches is its own: each batch's probes have
    their own listening port, /tmp marker and home canary."""

    MODES = {"sandbox": (), "plain": ("--no-sandbox",)}

    def __init__(self, folder: Path) -> None:
        self.graded: dict[str, dict[str, Graded]] = {}
        self.accepted: dict[str, list[socket.socket]] = {mode: [] for mode in self.MODES}
        self.servers = {mode: socket.create_server(("127.0.0.1", 0)) for mode in self.MODES}
        token = uuid.uuid4().hex
        self.markers = {
            mode: Path("/tmp") / f"sandbox-marker-{mode}-{token}" for mode in self.MODES
        }
        home = Path(pwd.getpwuid(os.getuid()).pw_dir)
        self.canaries = {
            mode: home / f".grader-sandbox-canary-{mode}-{token}" for mode in self.MODES
        }
        self.batches: dict[str, Batch] = {}
        if shutil.which("bwrap") is None:
            return
        for mode, flags in self.MODES.items():
            threading.Thread(target=self._serve, args=(mode,), daemon=True).start()
            self.canaries[mode].write_text("the interviewer's secret")
            (folder / mode).mkdir()
            notebooks = {
                name: write_probe(folder / mode / f"{name}.ipynb", cell)
                for name, cell in self.cells(mode).items()
            }
            self.batches[mode] = Batch(notebooks, *flags)

    def cells(self, mode: str) -> dict[str, str]:
        port = self.servers[mode].getsockname()[1]
        canary = str(self.canaries[mode])
        cells = {
            "solution": "pass",
            "network": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3).close()",
            "hunt": HUNT_FOR_THE_GRADER,
            "tmp": f"open({str(self.markers[mode])!r}, 'w').write('x')",
            "home": f"assert not __import__('os').path.exists({canary!r}), 'home is readable'",
            # from the checkout's parent without the sandbox (the whole disk takes long)
            "walk": WALK_FOR_SOLUTIONS.replace(
                "TOP", repr("/" if mode == "sandbox" else str(CHECKOUT.parent))
            ),
        }
        if mode == "sandbox":
            cells["privileges"] = PRIVILEGES
            cells["tmp_bounded"] = FILL_TMP
            cells.update({f"attack{i}": attack_cell(*case) for i, case in enumerate(ATTACKS)})
        return cells

    def _serve(self, mode: str) -> None:
        server = self.servers[mode]
        server.settimeout(600)
        with contextlib.suppress(OSError):
            while True:
                self.accepted[mode].append(server.accept()[0])

    def result(self) -> Probes:
        self.graded = {mode: batch.result() for mode, batch in self.batches.items()}
        return self

    def stop(self) -> None:
        for batch in self.batches.values():
            if batch.process.poll() is None:
                batch.process.kill()
                batch.process.wait()
        for mode in self.MODES:
            self.servers[mode].close()
            for connection in self.accepted[mode]:
                connection.close()
            self.markers[mode].unlink(missing_ok=True)
            self.canaries[mode].unlink(missing_ok=True)


start_in_background = Probes


@pytest.fixture(scope="module")
def probes(background) -> Probes:
    return background


@needs_bwrap
def test_sandboxed_solution_earns_full_marks(probes):
    graded = probes.graded["sandbox"]["solution"]
    assert graded.returncode == 0, graded.stderr
    assert graded.report["sandboxed"] is True
    assert graded.report["score"] == graded.report["max_score"]


@needs_bwrap
def test_sandbox_blocks_the_network(probes):
    sandboxed = probes.graded["sandbox"]["network"]
    assert probes.accepted["sandbox"] == []
    assert sandboxed.returncode == 0  # the cell's error is data, the suite still passes
    assert any("Error" in m for m in cell_errors(sandboxed)), cell_errors(sandboxed)
    plain = probes.graded["plain"]["network"]
    assert cell_errors(plain) == [] and len(probes.accepted["plain"]) == 1


HUNT_FOR_THE_GRADER = """
import os
mine = []
for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
        mine.append(open(f'/proc/{pid}/cmdline', 'rb').read())
    except OSError:
        pass
assert not any(b'grader.cli' in c for c in mine), 'the grader is visible'
"""


@needs_bwrap
def test_the_grader_process_is_out_of_sight(probes):
    """With bubblewrap installed every kernel has its own PID namespace and /proc, with
    --sandbox or without: the grader's process is not there to find or signal. (The hunt
    itself finds `grade` from outside the namespace: this process sees it.)"""
    assert cell_errors(probes.graded["sandbox"]["hunt"]) == []
    assert cell_errors(probes.graded["plain"]["hunt"]) == []
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "grader.cli"])
    try:
        hunt = subprocess.run([sys.executable, "-c", HUNT_FOR_THE_GRADER], capture_output=True)
        assert b"the grader is visible" in hunt.stderr, hunt.stderr
    finally:
        stand_in.kill()
        stand_in.wait()


@needs_bwrap
def test_sandbox_has_a_private_tmp(probes):
    assert cell_errors(probes.graded["sandbox"]["tmp"]) == []
    assert not probes.markers["sandbox"].exists()
    assert probes.markers["plain"].exists()


@needs_bwrap
def test_sandbox_hides_the_home_folder(probes):
    assert cell_errors(probes.graded["sandbox"]["home"]) == []
    assert "home is readable" in " ".join(cell_errors(probes.graded["plain"]["home"]))


CANARY = "canary-90b7d1e4"
# Everything a program the notebook starts can read: its own environment and that of
# every process it can see.
READ_EVERY_ENVIRONMENT = """
import subprocess
out = subprocess.run('env; cat /proc/*/environ', shell=True, capture_output=True).stdout
leaked = CANARY[::-1].encode() in out
raise RuntimeError(f'leaked: {leaked}')
""".replace("CANARY", repr(CANARY[::-1]))  # reversed: the card quotes the line that raised


@needs_bwrap
def test_sandbox_keeps_the_graders_environment_out(tmp_path):
    """The interviewer's secrets: in no kernel's environment (the allow-list), and in no
    process a kernel can see (its own PID namespace and /proc, with --sandbox or without,
    wherever bubblewrap is installed; without it, docs/security.md says what a program the
    notebook starts can read)."""
    secrets = {"GRADER_TEST_SECRET": CANARY, "GITHUB_TOKEN": CANARY}
    for flags in (["--sandbox"], ["--no-sandbox"]):
        graded = graded_with(tmp_path, READ_EVERY_ENVIRONMENT, *flags, env=secrets)
        assert cell_errors(graded) == ["RuntimeError: leaked: False"], flags
        assert CANARY not in graded.stdout + graded.stderr
    exposed = subprocess.run(
        ["sh", "-c", "cat /proc/*/environ"], capture_output=True, env={**os.environ, **secrets}
    )
    assert CANARY.encode() in exposed.stdout  # the same read, outside: the check can fail


@needs_bwrap
def test_sandbox_hides_neighbouring_gradings_wherever_tmpdir_is(tmp_path):
    """With TMPDIR outside /tmp and the home folders, the folder holding the scratch
    spaces is emptied too: another grading's connection file is out of sight."""
    tmpdir = Path("/var/tmp") / f"g-{uuid.uuid4().hex[:8]}"
    neighbour = tmpdir / "grader-neighbour"
    neighbour.mkdir(parents=True)
    (neighbour / "kernel-0.json").write_text('{"key": "' + CANARY + '"}')
    cell = (
        "import os\nparent = os.path.dirname(os.path.dirname(os.getcwd()))\n"
        "raise RuntimeError(f'sees: {sorted(os.listdir(parent))}')"
    )
    try:
        [sandboxed] = cell_errors(
            graded_with(tmp_path, cell, "--sandbox", env={"TMPDIR": str(tmpdir)})
        )
        assert "grader-" in sandboxed and "grader-neighbour" not in sandboxed, sandboxed
        [plain] = cell_errors(
            graded_with(tmp_path, cell, "--no-sandbox", env={"TMPDIR": str(tmpdir)})
        )
        assert "grader-neighbour" in plain, plain
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def test_sandbox_without_bubblewrap_exits_2(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", str(SOLUTIONS / "mha_interview.ipynb"), "--sandbox"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PATH": str(empty)},
    )  # fmt: skip
    assert done.returncode == 2
    assert "--sandbox needs bubblewrap" in done.stderr and done.stderr.count("\n") == 1


# -- the allow-list, with no privileges, on by default ------------------------------------

WALK_FOR_SOLUTIONS = """\
import os
found = []
for top in [TOP]:
    for folder, subfolders, files in os.walk(top):
        subfolders[:] = [s for s in subfolders if s not in ("proc", "sys", "dev")]
        found += [
            os.path.join(folder, f) for f in files
            if f.startswith("mha_") and f.endswith(".ipynb") or f == "catalog.json"
            or f == "_attention.py" and folder.endswith("exercises")
        ]
raise RuntimeError(f"found: {sorted(found)[:5]}")
"""


@needs_bwrap
def test_sandbox_is_on_by_default_and_shows_no_solutions_or_suites(probes):
    """Walking the whole disk from the kernel finds no notebook and no suite: the clone
    (solutions/, exercises/, tests/) is not in the allow-list. Without the sandbox the
    walk finds them from the checkout's parent folder (the test can fail)."""
    graded = probes.graded["sandbox"]["walk"]
    assert graded.report["sandboxed"] is True
    assert cell_errors(graded) == ["RuntimeError: found: []"], cell_errors(graded)
    plain = probes.graded["plain"]["walk"]
    assert plain.report["sandboxed"] is False
    assert cell_errors(plain) != ["RuntimeError: found: []"]


PRIVILEGES = """\
status = open("/proc/self/status").read()
caps = [line for line in status.splitlines() if line.startswith(("CapEff", "CapBnd", "NoNewPrivs"))]
raise RuntimeError(f"{caps}")
"""


@needs_bwrap
def test_sandbox_holds_no_capabilities_whoever_runs_the_grader(probes):
    """As root too (CI, containers, Gradescope): no capability, and no way to gain one."""
    [message] = cell_errors(probes.graded["sandbox"]["privileges"])
    assert "CapEff:\\t0000000000000000" in message and "CapBnd:\\t0000000000000000" in message
    assert "NoNewPrivs:\\t1" in message, message


ATTACKS = [
    ("umount /root", "/root"),  # uncover what an empty folder hid
    ("mount -o remount,rw / && touch /x", "/x"),  # write the host's root
    ("mount -t tmpfs none /usr && touch /usr/x", "/usr/x"),  # replace the system
    ("touch /etc/x", "/etc/x"),  # the view's own root is read-only
]


def attack_cell(attack: str, target: str) -> str:
    return (
        "import os, subprocess\n"
        f"done = subprocess.run({attack!r}, shell=True, capture_output=True, text=True)\n"
        f"written = {target!r} != '/root' and os.path.exists({target!r})\n"
        "raise RuntimeError(f'rc={done.returncode} written={written}')"
    )


@needs_bwrap
@pytest.mark.parametrize("case", range(len(ATTACKS)), ids=[a for a, _ in ATTACKS])
def test_sandbox_cannot_unmount_remount_or_write_outside_its_scratch(probes, case):
    [message] = cell_errors(probes.graded["sandbox"][f"attack{case}"])
    assert "written=False" in message and "rc=0" not in message, message
    assert not Path("/x").exists() and not Path("/usr/x").exists() and not Path("/etc/x").exists()


FILL_TMP = (
    "import os\nblock = b'x' * (1 << 20)\ntry:\n    with open('/tmp/fill', 'wb') as f:\n"
    "        for _ in range(1024):\n            f.write(block)\nexcept OSError as e:\n"
    "    raise RuntimeError(f'bounded at {os.path.getsize(\"/tmp/fill\") >> 20} MiB')"
)


@needs_bwrap
def test_sandbox_tmp_is_bounded(probes):
    [message] = cell_errors(probes.graded["sandbox"]["tmp_bounded"])
    assert message.startswith("RuntimeError: bounded at ") and int(message.split()[-2]) <= 256
