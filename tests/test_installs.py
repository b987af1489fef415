"""Both kinds of install behave the same inside a checkout. A plain `pip install .` is
imitated by a copy of the grader package outside the checkout (as in site-packages, with
the exercises copied in), run from inside a copy of the checkout: the checkout's exercises,
solutions and project files are the ones every command uses (see grader.core.project)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import ROOT

_LEFT_OUT = shutil.ignore_patterns(
    ".git", ".venv", ".whl", ".debs", "build", "*.egg-info", "__pycache__", ".*cache"
)


@pytest.fixture
def plain(tmp_path) -> tuple[Path, Path]:
    """(a copy of the checkout, a folder holding an installed copy of the package)."""
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT, checkout, ignore=_LEFT_OUT, symlinks=True)
    site = tmp_path / "site-packages"
    shutil.copytree(ROOT / "grader", site / "grader", ignore=_LEFT_OUT)  # exercises copied in
    return checkout, site


def run(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("GRADER_EXERCISES", None)
    return subprocess.run(
        [sys.executable, "-P", "-m", "grader.cli", *args],  # -P: not the checkout's package
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_copy_is_a_plain_install(plain):
    checkout, site = plain
    done = run(site, checkout, "list")
    assert done.returncode == 0, done.stderr
    assert "the installed copy in" in " ".join(done.stdout.split())


def test_a_new_exercise_folder_in_the_checkout_is_known(plain):
    checkout, site = plain
    shutil.copytree(checkout / "exercises" / "mha_causal", checkout / "exercises" / "mha_copy")
    suite = checkout / "exercises" / "mha_copy" / "suite.py"
    suite.write_text(suite.read_text().replace('id="mha_causal"', 'id="mha_copy"'))
    done = run(site, checkout, "list", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["id"]: row for row in json.loads(done.stdout)}
    assert rows["mha_copy"]["folder"] == str(checkout / "exercises" / "mha_copy")


def test_build_check_passes_the_checkout_and_fails_it_stale(plain):
    checkout, site = plain
    assert run(site, checkout, "build", "--check").returncode == 0
    (checkout / "exercises" / "mha_causal" / "hints.json").unlink()
    done = run(site, checkout, "build", "--check")
    assert done.returncode == 1 and "hints.json: missing" in done.stderr, done.stderr
    shutil.copy(
        ROOT / "exercises" / "mha_causal" / "hints.json", checkout / "exercises" / "mha_causal"
    )
    suite = checkout / "exercises" / "mha_causal" / "suite.py"
    suite.write_text(suite.read_text().replace("title=", 'title="Renamed " +', 1))
    done = run(site, checkout, "build", "--check")
    assert done.returncode == 1 and "catalog.json: out of date" in done.stderr, done.stderr


def test_gradescope_bundles_the_checkout_it_runs_in(plain, tmp_path):
    checkout, site = plain
    done = run(site, checkout, "gradescope", "mha_interview", "-o", str(tmp_path / "x.zip"))
    assert done.returncode == 0, done.stderr
    names = zipfile.ZipFile(tmp_path / "x.zip").namelist()
    assert any(n.endswith("exercises/mha_interview/suite.py") for n in names)


def test_outside_a_checkout_the_authoring_commands_say_they_need_one(plain, tmp_path):
    _, site = plain
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run(site, elsewhere, "gradescope", "mha_interview", "-o", str(tmp_path / "y.zip"))
    assert done.returncode == 2 and "inside a checkout" in done.stderr, done.stderr
    listed = run(site, elsewhere, "list", "--json")  # grading still works: the copy's exercises
    assert {"mha_interview", "mha_causal"} <= {row["id"] for row in json.loads(listed.stdout)}


def test_the_readme_and_constraints_say_the_same_of_the_torch_pin():
    constraints = (ROOT / "constraints.txt").read_text()
    readme = " ".join((ROOT / "README.md").read_text().split())
    [pin] = [line for line in constraints.splitlines() if line.startswith("torch==")]
    for text in (" ".join(constraints.split()), readme):
        assert "multi-GB CUDA build" in text
        assert "installs in seconds" not in text
    assert f"--index-url https://download.pytorch.org/whl/cpu {pin}" in readme
