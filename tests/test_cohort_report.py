"""The cohort's figures and its copy check, on the cohort of tests/cohort_cases.py (graded
in the shared batch), and the copy check's pieces on code written here."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from grader.core.results import CodeLine, Outcome
from grader.report import merge_texts, write_output_dir
from grader.report.charts import column_chart, row_chart
from grader.report.cohort import make_cohort, to_json_batch
from grader.report.progress import render_summary
from grader.report.similarity import REFERENCE, THRESHOLD, compare, tokens
from grader.report.theme import AA, DARK, LIGHT, contrast, readable
from grader.verdict.own_code import own_code
from tests.cohort_cases import COHORT, COPIED  # noqa: F401  (its notebooks join the batch)


@pytest.fixture(scope="module")
def outcomes(cohort) -> dict[str, Outcome]:
    return {
        name: Outcome.from_dict(json.loads(g.stdout)) for name, g in cohort["cohort_report"].items()
    }


def _who(path: str) -> str:
    return Path(path).parent.name


@pytest.mark.kernel
def test_the_copied_pair_is_flagged_and_no_independent_pair(outcomes):
    figures = make_cohort(list(outcomes.values()))
    pairs = {(_who(p.a), _who(p.b) if p.b != REFERENCE else REFERENCE) for p in figures.pairs}
    assert pairs == {("alice", "mallory")}
    (pair,) = figures.pairs
    assert pair.similarity >= THRESHOLD
    # mallory's code is all alice's: nearly every fingerprint of hers is in alice's
    assert pair.b_share > 0.9
    mallory = figures.code[pair.b]
    marked = {i for m in pair.matches for i in range(m.b[0], m.b[1] + 1)}
    assert any("ms = (h * h).mean(" in mallory[i].text for i in marked)
    # the scaffold handed in has nothing of its own; every other notebook was compared
    norms = next(e for e in figures.exercises if e.id == "norms")
    assert norms.compared == 4 and outcomes["dave"].report.own_code == []


@pytest.mark.kernel
def test_each_exercise_has_its_own_figures_as_percentages(outcomes):
    figures = make_cohort(list(outcomes.values()))
    assert figures.notebooks == 9 and figures.could_not_grade == 1
    norms, sampling = figures.exercises
    assert (norms.id, norms.notebooks, sampling.id, sampling.notebooks) == (
        "norms",
        5,
        "sampling",
        3,
    )
    scores = [outcomes[n].report.score for n in ("alice", "bob", "carol", "dave", "mallory")]
    assert norms.mean_percent == pytest.approx(100 * sum(scores) / 5 / norms.max_score)
    assert norms.full_marks == 3 and sampling.full_marks == 3 and sampling.mean_percent == 100
    assert norms.level_counts[0] == 1 and norms.level_counts[-1] == 3  # dave; the full marks
    # the hardest tests first: the ones carol's bug and the scaffold both fail, with her bug
    hardest = norms.tests[0]
    assert (hardest.passed, hardest.taken) == (3, 5)
    assert [n for _, n in hardest.bugs] == [1] and "eps" in hardest.bugs[0][0]
    rates = [t.rate for t in norms.tests]
    assert rates == sorted(rates)


@pytest.mark.kernel
def test_the_output_folder_names_files_relative_to_the_graded_folder(outcomes, tmp_path):
    write_output_dir(list(outcomes.values()), tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "alice__norms.html" in names and "zoe__norms.html" in names
    assert not any("tmp" in n or "subs" in n for n in names)
    document = json.loads((tmp_path / "cohort.json").read_text())
    assert [_who(p["a"]) for p in document["similar"]] == ["alice"]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "tests.csv").read_text())))
    assert len(rows) == sum(len(e["tests"]) for e in document["exercises"])
    assert {r["exercise"] for r in rows} == {"norms", "sampling"}
    (pair,) = csv.DictReader(io.StringIO((tmp_path / "similar.csv").read_text()))
    assert _who(pair["a"]) == "alice" and " = " in pair["matches"]
    index = (tmp_path / "index.html").read_text()
    assert ">alice/<wbr>norms.ipynb</a>" in index and "/tmp/" not in index.split("<main>")[1]


@pytest.mark.kernel
def test_merge_joins_shards_as_one_run_would(outcomes):
    everyone = list(outcomes.values())
    whole = to_json_batch(everyone, make_cohort(everyone))
    # alice in one shard and mallory in the other: the pair is found only when joined
    first = [outcomes[n] for n in ("alice", "bob", "erin", "zoe")]
    second = [o for o in everyone if o not in first]
    parts = [
        (f"part{i}.json", to_json_batch(p, make_cohort(p))) for i, p in enumerate((first, second))
    ]
    assert all(json.loads(text)["similar"] == [] for _, text in parts)
    kind, merged = merge_texts(parts)
    assert kind == "json" and merged == whole


@pytest.mark.kernel
def test_the_terminal_summary_gives_each_exercise_its_own_mean(outcomes):
    console = Console(record=True, width=120, file=io.StringIO())
    everyone = sorted(outcomes.values(), key=lambda o: o.notebook)
    render_summary(everyone, console, 1.0, make_cohort(everyone))
    text = console.export_text()
    assert "mean score" not in text  # no mean across exercises with different maxima
    assert "norms: 5 notebooks, mean 78% (39.8 of 51)" in text
    assert "sampling: 3 notebooks, mean 100% (50.0 of 50)" in text
    assert "alice/norms.ipynb  ~" in text and "95%" in text


# -- the copy check's pieces ---------------------------------------------------------------

ORIGINAL = """\
def attention(q, k, v, mask=None):
    # scores, scaled
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)
    return weights @ v


def split_heads(x, n_heads):
    batch, length, width = x.shape
    return x.view(batch, length, n_heads, width // n_heads).transpose(1, 2)
"""
# the same code with its names changed, comments gone, the helpers in the other order and
# extra parentheses
COPY = """\
def split_heads(t, h):
    b, n, d = t.shape
    return (t.view(b, n, h, d // h).transpose(1, 2))


def attention(q, k, v, mask=None):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float('-inf'))
    p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p, nan=0.)
    return p @ v
"""
# the same task written another way
OTHER = """\
def attention(q, k, v, mask=None):
    d = q.size(-1)
    logits = torch.einsum("bhqd,bhkd->bhqk", q, k) * d ** -0.5
    if mask is not None:
        logits = torch.where(mask, logits, torch.finfo(logits.dtype).min)
    probs = logits.softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", probs, v)


def split_heads(x, n_heads):
    b, t, c = x.shape
    return x.reshape(b, t, n_heads, -1).permute(0, 2, 1, 3)
"""


def _code(source: str) -> list[CodeLine]:
    return own_code([(0, source)], ["def attention(q, k, v, mask=None):"])


def test_renames_reordering_comments_and_layout_change_nothing():
    assert [t.text for t in tokens(_code("x = a + 1  # one"))] == ["V", "=", "V", "+", "1"]
    pairs = compare("ex", {"original": _code(ORIGINAL), "copy": _code(COPY), "other": _code(OTHER)})
    assert [(p.a, p.b) for p in pairs] == [("copy", "original")]
    assert pairs[0].similarity > 0.75  # runs across the moved helpers are lost


def test_the_scaffold_and_what_is_too_short_are_not_compared():
    given = ORIGINAL.splitlines()
    assert own_code([(3, ORIGINAL + "\nextra = 1\n")], given) == [CodeLine(4, 15, "extra = 1")]
    tiny = {"a": _code("y = x + 1"), "b": _code("y = x + 1")}
    assert compare("ex", tiny) == []  # too few fingerprints to say anything


def test_the_reference_is_always_the_second_side():
    pairs = compare("ex", {"zed": _code(COPY)}, reference=_code(ORIGINAL))
    assert [(p.a, p.b) for p in pairs] == [("zed", REFERENCE)]


def test_the_charts_draw_each_count():
    chart = column_chart([0, 2, 5], ["a", "b", "c"], "Scores in x", "desc", "axis")
    assert chart.count('<rect class="bar') == 3 and ">5</text>" in chart
    assert 'role="img"' in chart and "<desc" in chart
    rows = row_chart([1, 0], ["0 none", "1 shapes"], "Levels in x", "desc")
    assert "0 none" in rows and rows.count("<rect") == 2


def test_the_card_colours_meet_aa_in_both_modes():
    assert contrast((0, 0, 0), (255, 255, 255)) == pytest.approx(21)
    sheet = ".r1 {color: #8d8d8d; text-decoration-color: #8d8d8d}\n.r2 {color: #00ff00}"
    for theme in (LIGHT, DARK):
        fixed = readable(sheet, theme)
        for colour in set(__import__("re").findall(r"#([0-9a-f]{6})", fixed)):
            rgb = tuple(int(colour[i : i + 2], 16) for i in (0, 2, 4))
            assert contrast(rgb, theme.background_color) >= AA, (colour, theme)


@pytest.mark.kernel
def test_the_index_names_the_cell_that_kept_tests_from_running(outcomes):
    from dataclasses import replace

    from grader.core.outcomes import Status
    from grader.core.results import RootCause
    from grader.report.folders import index_trouble

    cause = RootCause(4, Status.ERROR, "SyntaxError: '(' was never closed", line=13, blocked=41)
    report = replace(outcomes["dave"].report, root_cause=cause)
    first, second = index_trouble(report)
    assert first == "cell 4, line 13: SyntaxError: '(' was never closed (41 tests blocked)"
    assert second.startswith("41 of 41 tests not passed;")  # no test names: the cause says why
    assert second.endswith("failed (error)")  # "cell 8 failed (error)", not "cells that failed"


@pytest.mark.kernel
def test_the_candidate_s_html_report_keeps_aa_contrast_in_both_modes(outcomes):
    import re

    from grader.report.card import to_html

    page = to_html(outcomes["carol"].report)
    light, dark = page.split("@media (prefers-color-scheme: dark)")
    for sheet, theme in ((light, LIGHT), (dark, DARK)):
        colours = set(re.findall(r"(?<![-\w])color: #([0-9a-f]{6})", sheet))
        assert colours, "no text colour found"
        for colour in colours:
            rgb = tuple(int(colour[i : i + 2], 16) for i in (0, 2, 4))
            assert contrast(rgb, theme.background_color) >= AA - 0.01, (colour, theme)
    assert "#00ff00" not in page
