"""A cohort as course staff would grade it, for the cohort report's tests (the figures, the
copy check, the pages in a browser): two exercises, independent solutions, a scaffold
handed in as it was, a bug, a file that is not a notebook, and one solution copied with
its names changed and its comments removed.

    subs/alice/norms.ipynb     written apart (benchmarks/similarity/notebooks)
    subs/mallory/norms.ipynb   alice's, renamed, comments and her own checks removed
    subs/bob/norms.ipynb       written apart by someone else
    subs/carol/norms.ipynb     the corpus's independent variant, eps outside the root
    subs/dave/norms.ipynb      the scaffold, untouched
    subs/erin/sampling.ipynb   written apart
    subs/frank/sampling.ipynb  written apart by someone else
    subs/grace/sampling.ipynb  the corpus's independent variant
    subs/zoe/norms.ipynb       not JSON
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat

from tests.cohort import Cohort
from tests.helpers import ROOT, SCAFFOLDS

COHORT = Cohort("cohort_report")
BENCH = ROOT / "benchmarks" / "similarity" / "notebooks"
VARIANTS = ROOT / "exercises"

# mallory's names for alice's
RENAMED = {
    "_HALF_TYPES": "LOWP",
    "_compute_dtype": "_dt_for",
    "ct": "wd",
    "xc": "h",
    "mean_sq": "ms",
    "normed": "y",
    "centred": "c0",
    "var": "v2",
    "out": "res",
}
COPIED = ("mallory", "alice")  # the pair the copy check must flag


def disguised(source: str) -> str:
    """`source` with alice's names renamed and every comment and docstring removed."""
    source = re.sub(r'\n\s*"""[\s\S]*?"""', "", source)
    source = re.sub(r"\s*#[^\n]*", "", source)
    for old, new in RENAMED.items():
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def _copy(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)
    return target


@COHORT.notebooks
def _notebooks(folder: Path) -> dict[str, Path]:
    subs = folder / "subs"
    made = {
        "alice": _copy(BENCH / "norms" / "alt_a.ipynb", subs / "alice" / "norms.ipynb"),
        "bob": _copy(BENCH / "norms" / "unseen.ipynb", subs / "bob" / "norms.ipynb"),
        "dave": _copy(SCAFFOLDS / "norms.ipynb", subs / "dave" / "norms.ipynb"),
        "erin": _copy(BENCH / "sampling" / "alt_a.ipynb", subs / "erin" / "sampling.ipynb"),
        "frank": _copy(BENCH / "sampling" / "unseen.ipynb", subs / "frank" / "sampling.ipynb"),
        "grace": _copy(
            VARIANTS / "sampling" / "variants" / "independent.ipynb",
            subs / "grace" / "sampling.ipynb",
        ),
    }
    alice = nbformat.read(made["alice"], as_version=4)
    alice.cells = [c for c in alice.cells if "def my_checks" not in c.source]
    for cell in alice.cells:
        if cell.cell_type == "code" and (
            "def rms_norm" in cell.source or "def layer_norm" in cell.source
        ):
            cell.source = disguised(cell.source)
    made["mallory"] = subs / "mallory" / "norms.ipynb"
    made["mallory"].parent.mkdir(parents=True)
    nbformat.write(alice, made["mallory"])
    carol = nbformat.read(VARIANTS / "norms" / "variants" / "independent.ipynb", as_version=4)
    bug = ("xs * torch.rsqrt(mean_sq + eps * c.pow(2))", "xs / (torch.sqrt(mean_sq) + eps * c)")
    cells = [c for c in carol.cells if bug[0] in c.source]
    assert len(cells) == 1, "carol's bug: the variant changed"
    cells[0].source = cells[0].source.replace(*bug)
    made["carol"] = subs / "carol" / "norms.ipynb"
    made["carol"].parent.mkdir(parents=True)
    nbformat.write(carol, made["carol"])
    made["zoe"] = subs / "zoe" / "norms.ipynb"
    made["zoe"].parent.mkdir(parents=True)
    made["zoe"].write_text("this is not a notebook\n")
    return made
