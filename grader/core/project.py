"""The project tree the authoring commands work on, the same in both kinds of install.

Installed editable (``pip install -e .``, as check.sh does), the grader's package is the
checkout's ``grader/`` and its exercises are the checkout's ``exercises/``. Installed
plainly (``pip install .``), the package is a copy in site-packages; run from inside a
checkout, `grade` then uses that checkout's exercises, solutions and project files (so a
new exercise folder is known, `grade build --check` checks the tree it runs in, and `grade
gradescope` bundles it), and only the grader's own code is the installed copy. Outside any
checkout, a plain install grades with the exercises it was installed with.
"""

from __future__ import annotations

from pathlib import Path

PROJECT_NAME = "mha-grader"


def is_checkout(folder: Path) -> bool:
    """Whether `folder` is a checkout of this project (its pyproject.toml names it, and it
    holds the grader package and the exercises)."""
    try:
        pyproject = (folder / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    named = f'name = "{PROJECT_NAME}"' in pyproject
    return named and (folder / "grader").is_dir() and (folder / "exercises").is_dir()


def installed_tree() -> Path:
    """The folder above the grader's package (the checkout, for an editable install)."""
    import grader

    return Path(grader.__file__).resolve().parent.parent


def checkout() -> Path | None:
    """The checkout `grade` works on: the installed one when the install is editable, else
    the working directory or the nearest folder above it that is a checkout; None if none."""
    tree = installed_tree()
    if is_checkout(tree):
        return tree
    try:
        here = Path.cwd().resolve()
    except OSError:  # the working directory was removed
        return None
    return next((folder for folder in (here, *here.parents) if is_checkout(folder)), None)


def is_editable() -> bool:
    """Whether the grader's own code is the checkout's (an edit to grader/ is live)."""
    return checkout() == installed_tree()
