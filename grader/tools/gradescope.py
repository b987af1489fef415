"""`grade gradescope EXERCISE`: the grader and one exercise as a Gradescope autograder zip.

Gradescope unpacks the zip into /autograder/source, runs `setup.sh` once to build its
image, then `run_autograder` for every submission. The zip holds, at its root::

    setup.sh          apt's Python 3.10+, a venv in /opt/grader, torch's CPU build (the
                      pin in constraints.txt), then the grader from grader-src/
    run_autograder    grades the uploaded notebook; always writes results/results.json
    autograder.json   what was packaged: exercise, points, grader version, torch pin
    grader-src/       pyproject.toml, README.md, constraints.txt and grader/, copied from
                      the checkout the grader runs from: of grader/exercises/, the shared
                      modules and this exercise's folder alone
    exercises/        the folder given with --exercises (or $GRADER_EXERCISES), if any,
                      likewise without the other exercises' folders

Two builds of the same tree are the same bytes: entries sorted, timestamps fixed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from grader.core.errors import UsageError

if TYPE_CHECKING:
    from grader.run.catalog import CatalogRow

DEFAULT_OUTPUT = "autograder.zip"
SOURCE = "grader-src"  # the grader's source, in the zip
EXTRA = "exercises"  # the extra exercise folder, in the zip
PROJECT_FILES = ("pyproject.toml", "README.md", "constraints.txt")
# caches, compiled and hidden files, notebooks and reference.json: grading reads none, and
# an exercise's folder may hold whole correct solutions (its corpus's notebook variants,
# and the reference solution's code that the cohort's copy check compares against)
_SKIPPED = re.compile(r"^(\..*|__pycache__|.*\.pyc|.*\.egg-info|.*\.ipynb|reference\.json)$")
_TORCH_PIN = re.compile(r"^\s*torch\s*==\s*([^\s;#]+)", re.MULTILINE)
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip can hold


@dataclass(frozen=True)
class Entry:
    """One file of the zip."""

    name: str
    data: bytes
    executable: bool = False


@dataclass(frozen=True)
class Manifest:
    """What a package holds (`autograder.json`)."""

    exercise: str
    title: str
    max_score: float
    grader_version: str
    torch: str
    exercises: str | None  # the extra exercise folder in the zip, if any

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"


def build_autograder(
    exercise: str, output: str | Path = DEFAULT_OUTPUT, exercises: str | Path | None = None
) -> Manifest:
    """Write the autograder zip for `exercise` to `output` and return what it holds.

    Raises:
        UsageError: see `main`.
    """
    entries, manifest = autograder_entries(exercise, exercises)
    write_zip(entries, Path(output))
    return manifest


def autograder_entries(
    exercise: str, exercises: str | Path | None = None
) -> tuple[list[Entry], Manifest]:
    """Every file of the zip for `exercise`, sorted by name, and its manifest."""
    import grader
    from grader.run.catalog import catalog_rows
    from grader.suite.exercise import use_exercises

    root = project_root()
    folders = use_exercises(exercises)
    extra = folders[0] if len(folders) > 1 else None
    row = _exercise_row(exercise, catalog_rows())
    manifest = Manifest(
        exercise=row.id,
        title=row.title,
        max_score=row.points,
        grader_version=grader.__version__,
        torch=torch_pin((root / "constraints.txt").read_text()),
        exercises=EXTRA if extra else None,
    )
    values = {
        "@EXERCISE@": shlex.quote(manifest.exercise),
        "@TORCH@": shlex.quote(manifest.torch),
        "@EXERCISES_DIR@": shlex.quote(manifest.exercises or ""),
    }
    own = Path(row.folder)  # the exercise's folder: the only one of its kind in the zip
    entries = [
        Entry("setup.sh", _script("setup.sh", values), executable=True),
        Entry("run_autograder", _script("run_autograder", values), executable=True),
        Entry("autograder.json", manifest.to_json().encode()),
        *(Entry(f"{SOURCE}/{name}", (root / name).read_bytes()) for name in PROJECT_FILES),
        *_tree(root / "grader", f"{SOURCE}/grader", _others(root / "grader" / "exercises", own)),
        *(_tree(extra, EXTRA, _others(extra, own)) if extra else ()),
    ]
    return sorted(entries, key=lambda e: e.name), manifest


def _others(folder: Path, own: Path) -> frozenset[Path]:
    """What of an exercises `folder` the zip leaves out: every exercise folder but `own`
    (another exercise's hidden suite, corpus and hints are not this one's to carry) and
    the catalog index (it lists them all)."""
    if not folder.is_dir():
        return frozenset()
    left = {folder / "catalog.json"}
    for child in folder.iterdir():
        if child.is_dir() and (child / "suite.py").is_file() and child.resolve() != own.resolve():
            left.add(child)
    return frozenset(p.resolve() for p in left)


def project_root() -> Path:
    """The checkout whose grader and exercises the zip bundles (see grader.core.project).

    Raises:
        UsageError: no checkout: the grader is installed plainly and runs outside one.
    """
    from grader.core.project import checkout

    root = checkout()
    if root is None:
        raise UsageError(
            "grade gradescope bundles the grader's source and exercises: run it inside a "
            "checkout of the grader (the folder with its pyproject.toml)"
        )
    missing = [name for name in PROJECT_FILES if not (root / name).is_file()]
    if missing:
        raise UsageError(f"{root}: no {', '.join(missing)}: the checkout is incomplete")
    return root


def torch_pin(constraints: str) -> str:
    """The version `torch==X` in constraints.txt's text.

    Raises:
        UsageError: constraints.txt pins no torch version.
    """
    match = _TORCH_PIN.search(constraints)
    if not match:
        raise UsageError("constraints.txt pins no torch version (want a line torch==X.Y.Z)")
    return match.group(1)


def write_zip(entries: list[Entry], path: Path) -> None:
    """Write `entries`, in their order, to the zip `path` (replaced whole, or left as it was)."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file, zipfile.ZipFile(file, "w") as archive:
            for entry in entries:
                info = zipfile.ZipInfo(entry.name, date_time=_EPOCH)
                info.create_system = 3  # Unix: the mode below is read
                info.external_attr = (0o100755 if entry.executable else 0o100644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, entry.data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def check_writable(path: Path) -> None:
    """Refuse, before building anything, an output the zip could not be written to."""
    folder = path.parent
    if path.is_dir():
        raise UsageError(f"{path}: is a directory, cannot write the autograder zip there")
    if not folder.is_dir():
        raise UsageError(f"{path}: cannot write the autograder zip: no folder {folder}")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{path}: cannot write the autograder zip: {folder} is not writable")


def _exercise_row(exercise: str, rows: list[CatalogRow]) -> CatalogRow:
    """The catalog's row for `exercise`.

    Raises:
        UsageError: no such exercise, or its folder is broken.
    """
    found = {row.id: row for row in rows}
    known = ", ".join(sorted(r.id for r in rows if not r.broken)) or "none"
    row = found.get(exercise)
    if row is None:
        raise UsageError(f"unknown exercise {exercise!r} (known: {known})")
    if row.broken:
        raise UsageError(f"exercise {exercise!r} cannot be loaded: {row.broken}")
    return row


def _script(name: str, values: dict[str, str]) -> bytes:
    """A script of autograder_files/ with its @PLACEHOLDERS@ filled in."""
    text = (resources.files("grader.tools") / "autograder_files" / name).read_text()
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text.encode()


def _tree(folder: Path, prefix: str, left: frozenset[Path] = frozenset()) -> Iterator[Entry]:
    """Every file under `folder` (symlinks followed), named `prefix/...`, without caches,
    compiled files, hidden files, notebooks, or what `left` names (resolved paths)."""
    for parent, dirs, files in os.walk(folder, followlinks=True):
        here = Path(parent)
        dirs[:] = sorted(
            d for d in dirs if not _SKIPPED.match(d) and (here / d).resolve() not in left
        )
        for name in sorted(files):
            if not _SKIPPED.match(name) and (here / name).resolve() not in left:
                relative = (here / name).relative_to(folder).as_posix()
                yield Entry(f"{prefix}/{relative}", (here / name).read_bytes())


# -- on Gradescope: grading one submission ---------------------------------------------------

KERNEL_USER = "grader-kernel"  # made by setup.sh; the candidate's code runs as this user
_LEFTOVERS = (".ipynb_checkpoints", "__MACOSX")


def uploaded_notebooks(submission: Path) -> list[str]:
    """Every uploaded notebook, relative to `submission`, in byte order; editor and macOS
    leftovers (.ipynb_checkpoints/, __MACOSX/, ._*) and symbolic links left out."""
    found = []
    for parent, dirs, files in os.walk(submission):
        dirs[:] = [d for d in dirs if d not in _LEFTOVERS and not os.path.islink(Path(parent, d))]
        for name in files:
            path = Path(parent, name)
            if name.endswith(".ipynb") and not name.startswith("._") and not path.is_symlink():
                found.append(path.relative_to(submission).as_posix())
    return sorted(found, key=lambda p: p.encode("utf-8", "surrogateescape"))


def chosen_notebook(notebooks: list[str], exercise: str) -> tuple[str | None, str]:
    """(the notebook to grade, "") or (None, why none can be)."""
    named = [n for n in notebooks if n.rsplit("/", 1)[-1] == f"{exercise}.ipynb"]
    if len(named) == 1:
        return named[0], ""
    if named:
        return None, (
            f"Several notebooks named {exercise}.ipynb uploaded: {', '.join(named)}; "
            "upload only one."
        )
    if len(notebooks) == 1:
        return notebooks[0], ""
    if not notebooks:
        return None, f"No notebook uploaded: upload {exercise}.ipynb."
    return None, (
        f"Several notebooks uploaded: {', '.join(notebooks)}; upload only {exercise}.ipynb."
    )


def write_zero(results: Path, reason: str, exercise: str, suite_hash: str = "") -> None:
    """A zero score whose output is `reason` (the student sees it); `extra_data` names the
    exercise and what graded it, as a grading's does."""
    import platform

    import grader
    from grader.core.text import printable

    document = {
        "score": 0,
        "output": printable(reason),
        "tests": [],
        "extra_data": {
            "exercise": exercise,
            "grader_version": grader.__version__,
            "python_version": platform.python_version(),
            "suite_hash": suite_hash,
        },
    }
    results.write_text(json.dumps(document), encoding="utf-8")


def suite_hash_of(exercise: str, extra: Path | None = None) -> str:
    """The `suite_hash` a grading of `exercise` records (its folder among the built-in
    exercises, or `extra`'s); "" when it cannot be found."""
    try:
        from grader.run.catalog import catalog_rows
        from grader.suite.exercise import folder_hash, use_exercises

        use_exercises(extra)
        folders = [row.folder for row in catalog_rows() if row.id == exercise and row.folder]
        return folder_hash(Path(folders[0])) if folders else ""
    except Exception:  # a zero is written whatever is broken: its reason says what
        return ""


def run_submission(argv: list[str]) -> int:
    """What `run_autograder` hands over to at once (`python -I -m grader.tools.gradescope run
    EXERCISE [EXERCISES_DIR]`): grade the uploaded notebook with `grade` and always leave
    results/results.json, grade's or a zero whose output says why. Environment:
    AUTOGRADER_ROOT (default /autograder), GRADE (default /opt/grader/bin/grade).

    Run as root (as Gradescope does), it first closes the autograder's own files to the
    candidate: source/ is readable by root only, results/ and the scripts writable by root
    only, and the kernel runs as `grader-kernel` (`--kernel-user`), or, where setup.sh did
    not make that user, as an unused uid grade picks: `extra_data.notes` says so."""
    import subprocess
    import sys

    exercise, extra = argv[0], (argv[1] if len(argv) > 1 else "")
    root = Path(os.environ.get("AUTOGRADER_ROOT") or "/autograder")
    grade = os.environ.get("GRADE") or "/opt/grader/bin/grade"
    results = root / "results" / "results.json"
    (root / "results").mkdir(parents=True, exist_ok=True)
    results.unlink(missing_ok=True)

    def zero(reason: str) -> int:
        print(f"run_autograder: {reason}", file=sys.stderr)
        folder = root / "source" / extra if extra else None
        write_zero(results, reason, exercise, suite_hash_of(exercise, folder))
        return 0

    if not os.access(grade, os.X_OK):
        return zero(f"The autograder is not installed ({grade} is missing); ask your instructor.")
    submission = root / "submission"
    notebook, why = chosen_notebook(
        uploaded_notebooks(submission) if submission.is_dir() else [], exercise
    )
    if notebook is None:
        return zero(why)
    flags = ["--exercise", exercise, "--gradescope", str(results)]
    if extra:
        flags += ["--exercises", str(root / "source" / extra)]
    protection, note = _protect(root)
    flags += protection
    if note:
        print(f"run_autograder: note: {note}", file=sys.stderr)
    done = subprocess.run(
        [grade, *flags, str(submission / notebook)],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    sys.stderr.write(done.stderr)
    # 0: full marks, 1: points lost; anything else (2: could not grade, 3: the grader's
    # own failure, 128+N: stopped) leaves no results: a zero with the last line grade printed.
    if done.returncode in (0, 1) and results.is_file() and results.stat().st_size:
        if note:
            _add_note(results, note)
        return 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    reason = lines[-1].replace(f"{submission}/", "") if lines else ""
    return zero(reason or f"grade exited with status {done.returncode} and wrote no results")


def _protect(root: Path) -> tuple[list[str], str]:
    """As root: the autograder's source readable by root only, results/ and the scripts
    writable by root only, and the kernel run as the kernel's user. Returns grade's flags
    for it, and a note for the staff when that user is missing (grade then runs the kernel
    as an unused uid it picks, and the card says which); none of it when not root."""
    import pwd

    user = os.environ.get("GRADER_KERNEL_USER") or KERNEL_USER
    if os.geteuid() != 0:
        return [], ""
    for folder, mode in ((root / "source", 0o700), (root / "results", 0o755), (root, 0o755)):
        if folder.is_dir():
            os.chown(folder, 0, 0)
            os.chmod(folder, mode)
    try:
        pwd.getpwnam(user)
    except KeyError:
        return [], (
            f"the kernel's user {user} does not exist here (setup.sh creates it): the "
            "candidate's code ran as an unused uid the grader picked (kernel_user)"
        )
    return ["--kernel-user", user], ""


def _add_note(results: Path, note: str) -> None:
    """Add `note` to results.json's extra_data (`notes`), for the course's staff."""
    try:
        document = json.loads(results.read_text(encoding="utf-8"))
        extra = document.setdefault("extra_data", {})
        extra["notes"] = [*extra.get("notes", []), note]
        results.write_text(json.dumps(document, indent=2), encoding="utf-8")
    except (OSError, ValueError, AttributeError):  # grade's own results stand as written
        return


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] != ["run"] or len(sys.argv) < 3:
        sys.exit("usage: python -I -m grader.tools.gradescope run EXERCISE [EXERCISES_DIR]")
    sys.exit(run_submission(sys.argv[2:]))
