"""--sandbox: the kernel cannot reach the network, see the grader, write the host's /tmp, or
read the home folder.

Each property is checked twice: under --sandbox (blocked) and without it (the same cell
gets through), so the test proves the sandbox is what blocks it.
"""

from __future__ import annotations

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

from tests.helpers import SOLUTIONS, Graded

pytestmark = pytest.mark.kernel
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed"
)


def graded_with(tmp_path: Path, cell: str, *flags: str) -> Graded:
    nb = nbformat.read(SOLUTIONS / "mha_interview.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(cell))
    path = tmp_path / f"nb-{uuid.uuid4().hex[:6]}.ipynb"
    nbformat.write(nb, path)
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", str(path), "--json", *flags],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return Graded(done.returncode, done.stdout, done.stderr)


def cell_errors(graded: Graded) -> list[str]:
    return [e["message"] for e in graded.report["cell_errors"]]


@needs_bwrap
def test_sandboxed_solution_earns_full_marks(tmp_path):
    graded = graded_with(tmp_path, "pass", "--sandbox")
    assert graded.returncode == 0, graded.stderr
    assert graded.report["score"] == graded.report["max_score"]


@needs_bwrap
def test_sandbox_blocks_the_network(tmp_path):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted = []

    def serve():
        server.settimeout(60)
        try:
            while True:
                connection, _ = server.accept()
                accepted.append(connection)
        except OSError:
            pass

    threading.Thread(target=serve, daemon=True).start()
    cell = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3).close()"
    try:
        sandboxed = graded_with(tmp_path, cell, "--sandbox")
        assert accepted == []
        assert sandboxed.returncode == 0  # the cell's error is data, the suite still passes
        assert any("Error" in m for m in cell_errors(sandboxed)), cell_errors(sandboxed)
        plain = graded_with(tmp_path, cell)
        assert cell_errors(plain) == [] and len(accepted) == 1
    finally:
        server.close()


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
def test_sandbox_hides_the_grader_process(tmp_path):
    assert cell_errors(graded_with(tmp_path, HUNT_FOR_THE_GRADER, "--sandbox")) == []
    assert "the grader is visible" in " ".join(
        cell_errors(graded_with(tmp_path, HUNT_FOR_THE_GRADER))
    )


@needs_bwrap
def test_sandbox_has_a_private_tmp(tmp_path):
    marker = Path("/tmp") / f"sandbox-marker-{uuid.uuid4().hex}"
    cell = f"open({str(marker)!r}, 'w').write('x')"
    try:
        graded_with(tmp_path, cell, "--sandbox")
        assert not marker.exists()
        graded_with(tmp_path, cell)
        assert marker.exists()
    finally:
        marker.unlink(missing_ok=True)


@needs_bwrap
def test_sandbox_hides_the_home_folder(tmp_path):
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    canary = home / f".grader-sandbox-canary-{uuid.uuid4().hex}"
    cell = f"assert not __import__('os').path.exists({str(canary)!r}), 'home is readable'"
    canary.write_text("the interviewer's secret")
    try:
        assert cell_errors(graded_with(tmp_path, cell, "--sandbox")) == []
        assert "home is readable" in " ".join(cell_errors(graded_with(tmp_path, cell)))
    finally:
        canary.unlink(missing_ok=True)


def test_sandbox_without_bubblewrap_exits_2(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", str(SOLUTIONS / "mha_interview.ipynb"), "--sandbox"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PATH": str(empty)},
    )  # fmt: skip
    assert done.returncode == 2
    assert "--sandbox needs bubblewrap" in done.stderr and done.stderr.count("\n") == 1
