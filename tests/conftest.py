import os
from pathlib import Path

import pytest

# Tests grade through subprocesses; make sure they import this checkout's grader.
os.environ.setdefault("PYTHONPATH", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def cohort(request, tmp_path_factory):
    """Every notebook the collected test modules declared (tests/cohort.py), graded in one
    batch: {key: {name: Graded}}."""
    from tests.cohort import MEMBERS
    from tests.helpers import grade_many

    modules = {item.module for item in request.session.items if "cohort" in item.fixturenames}
    wanted = [c for c in MEMBERS.values() if any(vars(m).get("COHORT") is c for m in modules)]
    names: dict[Path, list[tuple[str, str]]] = {}  # a file two modules need is graded once
    for member in wanted:
        folder = tmp_path_factory.mktemp(f"cohort-{member.key}")
        for name, path in member.build(folder).items():
            names.setdefault(path.resolve(), []).append((member.key, name))
    graded = grade_many({str(path): path for path in names}) if names else {}
    result: dict[str, dict] = {member.key: {} for member in wanted}
    for path, entry in graded.items():
        for key, name in names[Path(path)]:
            result[key][name] = entry
    return result
