import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# Tests grade through subprocesses; make sure they import this checkout's grader.
os.environ.setdefault("PYTHONPATH", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_COHORT = pytest.StashKey[dict]()
_BACKGROUND = pytest.StashKey[dict]()


def pytest_configure(config):
    """One warm template for the whole run: every `grade` a test starts (a direct child of
    this process) forks its kernels from it rather than booting its own (see
    `share_template`); a batch still starts its own, for its workers."""
    from grader.kernel.launch import share_template

    os.environ.update(share_template())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """The tests that read the cohort (tests/cohort.py) or a module's background work run
    last: the batch and the background work go on meanwhile."""
    items.sort(key=lambda item: "cohort" in item.fixturenames or "background" in item.fixturenames)


def pytest_collection_finish(session):
    """Start the cohort's one batch as soon as the run's tests are known (the notebooks of
    every collected module whose tests read it), and the background work of every module
    with a `start_in_background(folder)` whose tests read `background`."""
    from tests.cohort import MEMBERS
    from tests.helpers import Batch

    started = session.config.stash[_BACKGROUND] = {}
    for module in {item.module for item in session.items if "background" in item.fixturenames}:
        folder = Path(tempfile.mkdtemp(prefix="background-"))
        started[module.__name__] = (folder, module.start_in_background(folder))
    modules = {item.module for item in session.items if "cohort" in item.fixturenames}
    wanted = [c for c in MEMBERS.values() if any(vars(m).get("COHORT") is c for m in modules)]
    if not wanted:
        return
    root = Path(tempfile.mkdtemp(prefix="cohort-"))
    names: dict[Path, list[tuple[str, str]]] = {}  # a file two modules need is graded once
    for member in wanted:
        folder = root / member.key
        folder.mkdir()
        for name, path in member.build(folder).items():
            names.setdefault(path.resolve(), []).append((member.key, name))
    batch = Batch({str(path): path for path in names})
    session.config.stash[_COHORT] = {"root": root, "names": names, "batch": batch, "keys": wanted}


def pytest_unconfigure(config):
    for folder, work in config.stash.get(_BACKGROUND, {}).values():
        work.stop()
        shutil.rmtree(folder, ignore_errors=True)
    state = config.stash.get(_COHORT, None)
    if state is not None:
        process = state["batch"].process
        if process.poll() is None:  # stopped as a user would stop it: it cleans up
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(state["root"], ignore_errors=True)


@pytest.fixture(scope="session")
def cohort(request):
    """Every notebook the collected test modules declared (tests/cohort.py), graded in one
    batch started when collection finished: {key: {name: Graded}}."""
    state = request.config.stash[_COHORT]
    graded = state["batch"].result()
    result: dict[str, dict] = {member.key: {} for member in state["keys"]}
    for path, entry in graded.items():
        for key, name in state["names"][Path(path)]:
            result[key][name] = entry
    return result


@pytest.fixture(scope="module")
def background(request):
    """What this module's `start_in_background` started, once done (its `result()`)."""
    _, work = request.config.stash[_BACKGROUND][request.module.__name__]
    return work.result()
