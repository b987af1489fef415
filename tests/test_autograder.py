"""`grade gradescope`: the autograder zip, and its run_autograder in a Gradescope-like layout."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

import grader
from grader.cli.commands import gradescope_command as main
from grader.core.errors import ExitCode, UsageError
from grader.suite.exercise import load_catalog, suite_hash
from grader.tools.gradescope import autograder_entries, build_autograder, torch_pin
from tests.exercise_packages import GOOD_SUITE
from tests.helpers import ROOT, SCAFFOLDS, SOLUTIONS

EXERCISE = "mha_causal"
GRADE = Path(sys.executable).parent / "grade"


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("package") / "autograder.zip"
    assert main([EXERCISE, "-o", str(path)]) == ExitCode.FULL_MARKS
    return path


@pytest.fixture
def gradescope(tmp_path, package) -> Path:
    """Gradescope's /autograder: source/ (the unpacked zip), submission/, results/."""
    root = tmp_path / "autograder"
    _unpack(package, root / "source")
    (root / "submission").mkdir()
    (root / "results").mkdir()
    return root


def _unpack(package: Path, folder: Path) -> None:
    """Unzip as Gradescope does: with the modes recorded in the zip."""
    with zipfile.ZipFile(package) as archive:
        for info in archive.infolist():
            archive.extract(info, folder)
            (folder / info.filename).chmod(info.external_attr >> 16 & 0o777)


def _run_autograder(root: Path, **env: str) -> dict:
    """Run the unpacked run_autograder for one submission; return its results.json."""
    environment = {**os.environ, "AUTOGRADER_ROOT": str(root), "GRADE": str(GRADE), **env}
    done = subprocess.run(
        [root / "source" / "run_autograder"],
        env=environment,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    assert {"score", "output", "tests"} <= set(results)
    return results


def _upload(root: Path, name: str, data: bytes) -> None:
    path = root / "submission" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


# --- the zip ---------------------------------------------------------------------------


def test_zip_holds_scripts_manifest_and_the_grader_source(package):
    names = zipfile.ZipFile(package).namelist()
    assert names == sorted(names)
    assert {"setup.sh", "run_autograder", "autograder.json"} <= set(names)
    source = {n.removeprefix("grader-src/") for n in names if n.startswith("grader-src/")}
    assert {"pyproject.toml", "README.md", "constraints.txt", "grader/cli/__init__.py"} <= source
    assert f"grader/exercises/{EXERCISE}/suite.py" in source
    # this exercise's hidden suite alone: no other exercise's suite, corpus or hints
    folders = {
        n.split("/")[2] for n in source if n.startswith("grader/exercises/") and n.count("/") > 2
    }
    assert folders == {EXERCISE}
    assert "grader/exercises/catalog.json" not in source  # it lists every exercise
    assert {"grader/exercises/__init__.py", "grader/exercises/_attention.py"} <= source
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if not n.startswith("grader-src/") and "/" in n]
    # no notebook travels: an exercise's notebook variants are whole correct solutions
    assert any((ROOT / "exercises").glob("*/variants/*.ipynb"))
    assert not [n for n in names if n.endswith(".ipynb")]


def test_manifest_records_the_exercise_and_versions(package):
    manifest = json.loads(zipfile.ZipFile(package).read("autograder.json"))
    assert manifest["exercise"] == EXERCISE
    assert manifest["max_score"] == load_catalog()[EXERCISE].max_score
    assert manifest["grader_version"] == grader.__version__
    assert manifest["torch"] == torch_pin((ROOT / "constraints.txt").read_text())


def test_scripts_are_bash_with_every_placeholder_filled(package, tmp_path):
    archive = zipfile.ZipFile(package)
    for name in ("setup.sh", "run_autograder"):
        script = tmp_path / name
        script.write_bytes(archive.read(name))
        text = script.read_text()
        assert text.startswith("#!/usr/bin/env bash\n")
        assert not re.search(r"@[A-Z_]+@", text)
        done = subprocess.run(["bash", "-n", script], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr


def test_setup_installs_the_pinned_cpu_torch_before_the_bundled_grader(package):
    setup = zipfile.ZipFile(package).read("setup.sh").decode()
    pin = torch_pin((ROOT / "constraints.txt").read_text())
    assert pin == "2.13.0" and f"TORCH={pin}\n" in setup
    torch = setup.index('--index-url https://download.pytorch.org/whl/cpu "torch==$TORCH"')
    assert torch < setup.index('-c "$HERE/grader-src/constraints.txt" "$HERE/grader-src"')


def test_scripts_are_executable_in_the_zip(package):
    modes = {i.filename: i.external_attr >> 16 for i in zipfile.ZipFile(package).infolist()}
    assert modes["run_autograder"] == modes["setup.sh"] == 0o100755
    assert modes["autograder.json"] == 0o100644


def test_two_builds_are_the_same_bytes(package, tmp_path):
    again = tmp_path / "again.zip"
    build_autograder(EXERCISE, again)
    assert again.read_bytes() == package.read_bytes()


def test_unknown_exercise_is_a_one_line_usage_error(tmp_path):
    with pytest.raises(UsageError) as caught:
        main(["nope", "-o", str(tmp_path / "a.zip")])
    message = str(caught.value)
    assert caught.value.exit_code == 2 and "\n" not in message
    assert "unknown exercise 'nope'" in message and EXERCISE in message
    assert not (tmp_path / "a.zip").exists()


@pytest.mark.parametrize(
    ("output", "problem"), [("absent/a.zip", "no folder"), (".", "is a directory")]
)
def test_an_unwritable_output_is_refused_before_building(tmp_path, output, problem):
    with pytest.raises(UsageError, match=problem):
        main([EXERCISE, "-o", str(tmp_path / output)])


def test_an_extra_exercises_folder_is_bundled_and_graded_with(tmp_path):
    extra = tmp_path / "extra"
    (extra / "alpha").mkdir(parents=True)
    (extra / "alpha" / "__init__.py").write_text("")
    (extra / "alpha" / "suite.py").write_text(GOOD_SUITE)
    (extra / "beta").mkdir()
    (extra / "beta" / "suite.py").write_text("SECRET = 1\n")
    (extra / "alpha" / "__pycache__").mkdir()
    (extra / "alpha" / "__pycache__" / "suite.cpython-311.pyc").write_bytes(b"")
    # In a process of its own: --exercises changes which exercises this one loads.
    code = "import sys; from grader.cli.commands import gradescope_command as main; sys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", code, "alpha", "--exercises", str(extra)]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    archive = zipfile.ZipFile(tmp_path / "autograder.zip")
    names = archive.namelist()
    assert {"exercises/alpha/__init__.py", "exercises/alpha/suite.py"} <= set(names)
    assert not [n for n in names if "__pycache__" in n]
    assert not [n for n in names if "beta" in n]  # another exercise of that folder
    assert not [n for n in names if n.startswith("grader-src/grader/exercises/mha_")]
    assert json.loads(archive.read("autograder.json"))["exercises"] == "exercises"
    script = archive.read("run_autograder").decode()
    assert re.search(r"-m grader\.tools\.gradescope run \S+ exercises\n", script), script


def test_a_plain_install_outside_a_checkout_is_refused(monkeypatch, tmp_path):
    (tmp_path / "grader").mkdir()
    monkeypatch.setattr(grader, "__file__", str(tmp_path / "grader" / "__init__.py"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="run it inside a checkout of the grader"):
        autograder_entries(EXERCISE)


# --- run_autograder: which upload, and a zero that says why -----------------------------


def test_no_upload_scores_zero_with_the_reason(gradescope):
    results = _run_autograder(gradescope)
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"] == f"No notebook uploaded: upload {EXERCISE}.ipynb."


def test_several_notebooks_none_named_for_the_exercise_score_zero(gradescope):
    # Names a JSON string must escape: the zero is still valid JSON, naming both.
    for name in ('a "quoted".ipynb', "back\\slash.ipynb"):
        _upload(gradescope, name, b"{}")
    results = _run_autograder(gradescope)
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"] == (
        'Several notebooks uploaded: a "quoted".ipynb, back\\slash.ipynb; '
        f"upload only {EXERCISE}.ipynb."
    )


def test_an_unreadable_upload_scores_zero_with_grades_reason(gradescope):
    _upload(gradescope, f"{EXERCISE}.ipynb", b"\x00\xff" * 100)
    results = _run_autograder(gradescope)
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"] == (
        f"grade: error: {EXERCISE}.ipynb: not a text file (not UTF-8): is it a notebook?"
    )


def test_a_missing_grade_command_scores_zero_saying_so(gradescope, tmp_path):
    _upload(gradescope, f"{EXERCISE}.ipynb", b"{}")
    missing = str(tmp_path / "nowhere" / "grade")
    results = _run_autograder(gradescope, GRADE=missing, PYTHON=sys.executable)
    assert results["score"] == 0 and "autograder is not installed" in results["output"]
    # no Python either: the script's own fixed text
    results = _run_autograder(gradescope, GRADE=missing)
    assert results["score"] == 0 and "could not run" in results["output"]


@pytest.fixture
def fake_grade(tmp_path) -> Path:
    """A `grade` that records its arguments, prints $FAKE_ERROR and exits $FAKE_STATUS."""
    script = tmp_path / "bin" / "grade"
    script.parent.mkdir()
    script.write_text(
        '#!/usr/bin/env bash\nprintf "%s\\n" "$@" >"$FAKE_ARGS"\n'
        'printf "%s" "$FAKE_ERROR" >&2\nexit "$FAKE_STATUS"\n'
    )
    script.chmod(0o755)
    return script


@pytest.mark.parametrize(
    ("status", "error", "output"),
    [
        (3, 'noise\ngrade: internal error: a "b" \\ c\n\n', 'grade: internal error: a "b" \\ c'),
        (143, "", "grade exited with status 143 and wrote no results"),
        (0, "", "grade exited with status 0 and wrote no results"),
    ],
)
def test_a_grade_that_leaves_no_results_scores_zero_with_its_last_line(
    gradescope, fake_grade, tmp_path, status, error, output
):
    _upload(gradescope, f"sub/{EXERCISE}.ipynb", b"{}")
    _upload(gradescope, "scratch.ipynb", b"{}")
    _upload(gradescope, f".ipynb_checkpoints/{EXERCISE}-checkpoint.ipynb", b"{}")
    env = {
        "GRADE": str(fake_grade),
        "PYTHON": sys.executable,
        "FAKE_ARGS": str(tmp_path / "args"),
        "FAKE_ERROR": error,
        "FAKE_STATUS": str(status),
    }
    results = _run_autograder(gradescope, **env)
    assert results == {
        "score": 0,
        "output": output,
        "tests": [],
        "extra_data": {
            "exercise": EXERCISE,
            "grader_version": grader.__version__,
            "python_version": platform.python_version(),
            "suite_hash": suite_hash(load_catalog()[EXERCISE]),  # what a grading records
        },
    }
    # The notebook named for the exercise wins, wherever it is in the upload.
    assert (tmp_path / "args").read_text().splitlines() == [
        "--exercise",
        EXERCISE,
        "--gradescope",
        str(gradescope / "results" / "results.json"),
        str(gradescope / "submission" / "sub" / f"{EXERCISE}.ipynb"),
    ]


@pytest.mark.kernel
def test_the_reference_solution_gets_full_marks(gradescope):
    _upload(gradescope, f"{EXERCISE}.ipynb", (SOLUTIONS / f"{EXERCISE}.ipynb").read_bytes())
    _upload(gradescope, "notes/scratch.ipynb", b"not a notebook")
    results = _run_autograder(gradescope)
    assert results["score"] == load_catalog()[EXERCISE].max_score > 0, results["output"]
    assert results["tests"] and all(t["status"] == "passed" for t in results["tests"])


@pytest.mark.kernel
def test_the_only_notebook_is_graded_whatever_its_name(gradescope):
    _upload(gradescope, "my attempt.ipynb", (SCAFFOLDS / f"{EXERCISE}.ipynb").read_bytes())
    results = _run_autograder(gradescope)
    assert 0 <= results["score"] < load_catalog()[EXERCISE].max_score, results["output"]
    assert results["tests"] and any(t["status"] == "failed" for t in results["tests"])


# --- as Gradescope runs it: as root, the candidate's code as an unprivileged user ----------

HOSTILE_CELLS = [
    # rewrite the rest of the running script, and the results Gradescope reads
    "import glob, os\nfor top in ('/autograder', '/tmp'):\n"
    "    for path in glob.glob(top + '/**', recursive=True):\n"
    "        if path.endswith(('run_autograder', 'results.json')):\n            try:\n"
    "                open(path, 'a').write('\\necho forged')\n            except OSError as e:\n"
    "                print('refused', path, e)",
    # read the hidden suite from the autograder's source and raise with it
    "import glob\nfound = [p for top in ('/autograder', '/tmp', '/opt', '/root', '/home', '/work')\n"
    "         for p in glob.glob(top + '/**/suite.py', recursive=True)]\n"
    "text = [open(p).read().splitlines()[0] for p in found if 'mha_causal' in p]\n"
    "raise RuntimeError(f'SUITE {text}')",
]


@pytest.fixture
def as_kernel_user(monkeypatch):
    """Root, a user for the kernel, and an interpreter that user can run (a test machine
    may keep its Python under /root: the folders on its way get o+x while the test runs)."""
    if os.geteuid() != 0:
        pytest.skip("Gradescope runs the autograder as root")
    import pwd

    user = "nobody"
    pwd.getpwnam(user)
    changed = []
    for place in {os.path.realpath(sys.executable), os.path.realpath(sys.prefix)}:
        for folder in Path(place).parents:
            mode = folder.stat().st_mode
            if not mode & 0o001:
                folder.chmod(mode | 0o001)
                changed.append((folder, mode))
    monkeypatch.setenv("GRADER_KERNEL_USER", user)
    try:
        yield user
    finally:
        for folder, mode in changed:
            folder.chmod(mode)


@pytest.mark.kernel
def test_a_submission_can_neither_rewrite_the_autograder_nor_read_its_suite(
    gradescope, as_kernel_user
):
    """The scaffold, plus cells that append to run_autograder and results.json while they
    run and that read the hidden suite from source/: the scaffold's score, no forged
    line, no line of the suite in what the student sees."""
    nb = nbformat.read(SCAFFOLDS / f"{EXERCISE}.ipynb", as_version=4)
    nb.cells += [nbformat.v4.new_code_cell(c) for c in HOSTILE_CELLS]
    _upload(gradescope, f"{EXERCISE}.ipynb", nbformat.writes(nb).encode())
    script = (gradescope / "source" / "run_autograder").read_text()
    results = _run_autograder(gradescope)
    assert (gradescope / "source" / "run_autograder").read_text() == script
    assert results["score"] < load_catalog()[EXERCISE].max_score
    assert results["extra_data"]["sandboxed"] in (True, False)
    shown = json.dumps(results)
    assert "forged" not in (gradescope / "results" / "results.json").read_text()
    assert "Hidden suite" not in shown and "SUITE []" in shown, shown
    assert oct((gradescope / "source").stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize(
    "name",
    ["--help.ipynb", "-x;rm -rf ~.ipynb", "new\nline.ipynb", "$(id)`id`.ipynb", "ü 名.ipynb"],
)
def test_odd_upload_names_reach_grade_as_one_path_and_nothing_else(
    gradescope, fake_grade, tmp_path, name
):
    _upload(gradescope, name, b"{}")
    env = {
        "GRADE": str(fake_grade),
        "PYTHON": sys.executable,
        "FAKE_ARGS": str(tmp_path / "args"),
        "FAKE_ERROR": "grade: error: something",
        "FAKE_STATUS": "2",
    }
    results = _run_autograder(gradescope, **env)
    assert results["score"] == 0 and results["output"] == "grade: error: something"
    args = (tmp_path / "args").read_text()
    assert args.endswith(f"{gradescope / 'submission' / name}\n")
    assert not (Path.home() / "id").exists()


@pytest.mark.kernel
def test_as_root_without_the_kernel_user_the_staff_are_told_and_the_source_stays_closed(
    gradescope, monkeypatch
):
    if os.geteuid() != 0:
        pytest.skip("Gradescope runs the autograder as root")
    monkeypatch.setenv("GRADER_KERNEL_USER", "no-such-kernel-user")
    _upload(gradescope, f"{EXERCISE}.ipynb", (SOLUTIONS / f"{EXERCISE}.ipynb").read_bytes())
    results = _run_autograder(gradescope)
    assert results["score"] == load_catalog()[EXERCISE].max_score, results["output"]
    extra = results["extra_data"]
    assert extra["kernel_user"].startswith("uid ") and "(picked)" in extra["kernel_user"]
    [note] = extra["notes"]
    assert "no-such-kernel-user does not exist here (setup.sh creates it)" in note
    assert oct((gradescope / "source").stat().st_mode & 0o777) == "0o700"


@pytest.mark.kernel
def test_as_root_the_kernel_user_runs_an_interpreter_under_a_closed_folder(gradescope):
    """Python under /root (mode 0700, as pyenv and conda make it): inside the sandbox the
    kernel's user reaches it (bubblewrap builds the way in as root); results.json says
    who the kernel ran as."""
    from grader.kernel.launch import unreachable_for_others
    from grader.kernel.sandbox import available

    if os.geteuid() != 0 or not unreachable_for_others() or not available():
        pytest.skip("needs root, an interpreter under a closed folder, and bubblewrap")
    _upload(gradescope, f"{EXERCISE}.ipynb", (SOLUTIONS / f"{EXERCISE}.ipynb").read_bytes())
    results = _run_autograder(gradescope, GRADER_KERNEL_USER="nobody")
    assert results["score"] == load_catalog()[EXERCISE].max_score, results["output"]
    extra = results["extra_data"]
    assert extra["kernel_user"] == "nobody" and extra["sandboxed"] is True
    assert "notes" not in extra


@pytest.mark.kernel
def test_a_kernel_user_that_cannot_reach_the_interpreter_is_said_in_one_line(tmp_path):
    from grader.kernel.launch import unreachable_for_others

    closed = unreachable_for_others()
    if os.geteuid() != 0 or not closed:
        pytest.skip("needs root and an interpreter under a folder closed to other users")
    notebook = SOLUTIONS / f"{EXERCISE}.ipynb"
    command = [str(GRADE), "--cold", "--no-sandbox", "--kernel-user", "nobody", str(notebook)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("grade: error: could not start the kernel as nobody: ")
    assert f"{closed} is closed to other users" in line and "grade in the sandbox" in line
