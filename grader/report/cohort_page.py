"""index.html of `--output DIR`: the cohort at a glance, one self-contained file.

For each exercise, its figures and two pictures (scores, levels reached) and its hardest
tests with the likely bugs behind them; then the pairs of similar code, each with its
matching lines side by side; then every notebook in a table that sorts by any column. No
network, no library: the styles, the charts (`grader.report.charts`) and a few lines of
script to sort are in the page. Light and dark follow the reader's setting; every colour
of text meets WCAG AA contrast on its background (checked in a browser by
tests/test_browser.py). Every string from a notebook is HTML-escaped.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from urllib.parse import quote

from grader.core.results import CodeLine, Outcome
from grader.core.text import printable
from grader.report.charts import column_chart, row_chart
from grader.report.cohort import Cohort, ExerciseStats
from grader.report.similarity import REFERENCE, Pair

_HARDEST = 10  # tests listed per exercise before "more"
_SHOWN_LINES = 400  # lines of a pair's code shown per side


STYLE = """
:root { color-scheme: light dark;
  --bg: #ffffff; --fg: #1b1b1b; --muted: #545454; --line: #d0d0d0; --panel: #f4f5f7;
  --link: #0a55c7; --bar: #4f7fd9; --accent: #2e7d32; --bad: #b3261e; --bad-bg: #fdecea;
  --mark: #fff0a8; --mark-fg: #1b1b1b; }
@media (prefers-color-scheme: dark) { :root {
  --bg: #121316; --fg: #e6e6e6; --muted: #b3b3b3; --line: #3d4046; --panel: #1d1f23;
  --link: #8fb8ff; --bar: #6f9be8; --accent: #6cc070; --bad: #ff9c8f; --bad-bg: #3a1f1c;
  --mark: #5a4a00; --mark-fg: #fff6cc; } }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 80rem; padding: 1.5rem 2rem 4rem; background: var(--bg);
  color: var(--fg); font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
a { color: var(--link); }
h1 { margin: 0 0 .25rem; font-size: 1.8rem; }
h1, p { overflow-wrap: anywhere; }
h2 { margin: 2.5rem 0 .25rem; font-size: 1.4rem; border-bottom: 1px solid var(--line);
  padding-bottom: .25rem; }
h3 { margin: 1.5rem 0 .5rem; font-size: 1.1rem; }
.muted, .title, caption, figcaption { color: var(--muted); }
.title { font-weight: normal; font-size: 1rem; margin-left: .5rem; }
nav { margin: .75rem 0; display: flex; flex-wrap: wrap; gap: .25rem 1.25rem; }
code, pre { font-family: ui-monospace, Menlo, "DejaVu Sans Mono", Consolas, monospace;
  font-size: .88rem; }
.figures { display: flex; flex-wrap: wrap; gap: .5rem 1.5rem; margin: .5rem 0 1rem;
  padding: 0; list-style: none; }
.figures b { font-size: 1.25rem; }
.charts { display: flex; flex-wrap: wrap; gap: 1rem 2.5rem; }
figure { margin: 0; flex: 1 1 20rem; max-width: 30rem; }
figcaption { font-size: .9rem; margin-bottom: .25rem; }
svg.chart { width: 100%; height: auto; display: block; }
svg.chart text { fill: var(--fg); }
svg.chart text.caption { fill: var(--muted); }
svg.chart .bar { fill: var(--bar); }
svg.chart .bar.accent { fill: var(--accent); }
svg.chart .axis { stroke: var(--line); }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid var(--line); padding: .35rem .7rem; text-align: left;
  vertical-align: top; overflow-wrap: normal; word-break: normal; }
th { font-weight: 600; white-space: nowrap; }
td.n, th.n { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td.name { min-width: 12rem; }
tr.error td { background: var(--bad-bg); }
tr.full td:first-child { box-shadow: inset 4px 0 var(--accent); }
.rate { display: flex; align-items: center; gap: .5rem; white-space: nowrap; }
.meter { width: 6rem; height: .6rem; background: var(--panel); border: 1px solid var(--line);
  border-radius: .3rem; overflow: hidden; flex: none; }
.meter span { display: block; height: 100%; background: var(--bar); }
th button { font: inherit; color: inherit; background: none; border: 0; padding: 0;
  cursor: pointer; white-space: nowrap; }
th button::after { content: " \\2195"; color: var(--muted); }
th[aria-sort="ascending"] button::after { content: " \\2191"; }
th[aria-sort="descending"] button::after { content: " \\2193"; }
details.pair { border: 1px solid var(--line); border-radius: .4rem; margin: .5rem 0;
  background: var(--panel); }
details.pair summary { padding: .5rem .75rem; cursor: pointer; }
.sides { display: grid; grid-template-columns: 1fr 1fr; gap: .75rem; padding: 0 .75rem .75rem; }
.side { min-width: 0; }
.side h4 { margin: .25rem 0; font-size: .95rem; overflow-wrap: anywhere; }
.side pre { margin: 0; padding: .5rem; background: var(--bg); border: 1px solid var(--line);
  overflow-x: auto; max-height: 32rem; }
.side pre span { display: block; white-space: pre; }
.side pre span.m { background: var(--mark); color: var(--mark-fg); }
.side pre i { font-style: normal; color: var(--muted); user-select: none; }
.side pre span.m i { color: var(--mark-fg); }
.bad { color: var(--bad); }
@media (max-width: 48rem) {
  body { padding: 1rem; }
  .sides { grid-template-columns: 1fr; }
  table.cards thead { display: none; }
  table.cards, table.cards tbody, table.cards tr, table.cards td { display: block; }
  table.cards tr { border-bottom: 1px solid var(--line); padding: .4rem 0; }
  table.cards td { border: none; padding: .1rem .25rem; text-align: left; }
  table.cards td[data-label]::before { content: attr(data-label) ": "; color: var(--muted); }
}
"""

# Sorting: a header's button sorts its table's rows by that column's data-v (numbers as
# numbers, the rest as text), again to reverse; the order of equal rows is kept.
SCRIPT = """
document.querySelectorAll("table.sortable").forEach((table) => {
  const heads = Array.from(table.tHead.rows[0].cells);
  heads.forEach((th, col) => {
    const button = th.querySelector("button");
    if (!button) return;
    button.addEventListener("click", () => {
      const up = th.getAttribute("aria-sort") !== "ascending";
      heads.forEach((h) => h.removeAttribute("aria-sort"));
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      const key = (row) => row.cells[col].dataset.v ?? row.cells[col].textContent;
      const numeric = th.classList.contains("n");
      const rows = Array.from(table.tBodies[0].rows);
      rows.sort((a, b) => {
        const [x, y] = [key(a), key(b)];
        const order = numeric ? Number(x) - Number(y) : x.localeCompare(y);
        return up ? order : -order;
      });
      table.tBodies[0].append(...rows);
    });
  });
});
"""


def _e(text: object) -> str:
    return html.escape(printable(str(text)))


def breakable(text: str) -> str:
    """`text` escaped, with places a line may break after `/` and `_` (never inside a
    word): long paths and test ids wrap without a word cut in two."""
    out = _e(text)
    for mark in ("/", "_"):
        out = out.replace(mark, mark + "<wbr>")
    return out


def href(slug: str, extension: str) -> str:
    return html.escape(quote(f"{slug}.{extension}"))


def _percent(value: float) -> str:
    return f"{value:.0f}%"


def index_page(
    outcomes: Sequence[Outcome],
    cohort: Cohort,
    names: Mapping[str, str],
    slugs: Mapping[str, str],
    rows: Sequence[str],
    folder: str,
    files: Sequence[str],
) -> str:
    """The page: `names` (notebook -> name relative to `folder`), `slugs` (notebook ->
    file name), `rows` (the notebooks table's rows, `notebook_row`), `files` (the other
    files in the folder to link: CSV and JSON)."""
    full = sum(o.report is not None and o.report.full_marks for o in outcomes)
    lost = sum(o.report is not None and not o.report.full_marks for o in outcomes)
    summary = (
        f"{len(outcomes)} notebook{'s' * (len(outcomes) != 1)} graded in <code>{_e(folder)}</code>: "
        f"{full} with full marks, {lost} with points lost, "
        f"{cohort.could_not_grade} could not be graded."
    )
    links = [f'<a href="#{_anchor(e.id)}">{_e(e.id)}</a>' for e in cohort.exercises]
    links += ['<a href="#similar">similar code</a>', '<a href="#notebooks">notebooks</a>']
    links += [f'<a href="{html.escape(quote(f))}">{_e(f)}</a>' for f in files]
    body = [
        "<header>",
        "<h1>Cohort report</h1>",
        f"<p>{summary}</p>",
        f'<nav aria-label="sections">{"".join(links)}</nav>',
        "</header>",
        "<main>",
    ]
    for exercise in cohort.exercises:
        body += _exercise_section(exercise)
    body += _similar_section(cohort, names, slugs)
    body += [
        '<section id="notebooks">',
        "<h2>Notebooks</h2>",
        '<p class="muted">Sort by a column with its heading. Each name opens its report card.</p>',
        '<div class="scroll"><table class="sortable cards">',
        "<thead><tr>",
        '<th scope="col"><button type="button">notebook</button></th>',
        '<th scope="col"><button type="button">exercise</button></th>',
        '<th scope="col" class="n"><button type="button">score</button></th>',
        '<th scope="col" class="n"><button type="button">level</button></th>',
        '<th scope="col" class="n"><button type="button">time</button></th>',
        '<th scope="col">what went wrong</th>',
        "</tr></thead>",
        "<tbody>",
        *rows,
        "</tbody></table></div>",
        "</section>",
        "</main>",
    ]
    return page("Cohort report", "\n".join(body), SCRIPT)


def page(title: str, body: str, script: str = "") -> str:
    """A complete page in the cohort's style."""
    tail = f"<script>{script}</script>\n" if script else ""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"{body}\n{tail}</body>\n</html>\n"
    )


def _anchor(exercise: str) -> str:
    return "exercise-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in exercise)


def _exercise_section(stats: ExerciseStats) -> list[str]:
    n = stats.notebooks
    figures = [
        f"<li><b>{n}</b> notebook{'s' * (n != 1)}</li>",
        f"<li>mean <b>{_percent(stats.mean_percent)}</b> "
        f"({stats.mean_score:.1f} of {stats.max_score:g} points)</li>",
        f"<li>median <b>{_percent(stats.median_percent)}</b></li>",
        f"<li><b>{stats.full_marks}</b> with full marks</li>",
    ]
    bins = [0] * 11  # 0-9%, ..., 90-99%, 100%
    for percent in stats.percents:
        bins[10 if percent >= 100 else min(9, int(percent // 10))] += 1
    labels = [str(10 * i) for i in range(11)]
    tips = [f"{10 * i}-{10 * i + 9}%: {c}" for i, c in enumerate(bins[:10])]
    tips.append(f"100% (full marks): {bins[10]}")
    scores = column_chart(
        bins,
        labels,
        f"Scores in {stats.id}",
        f"How many of the {n} notebooks scored in each tenth of the maximum; " + ", ".join(tips),
        "% of the maximum score (the last bar: full marks)",
        tips,
        highlight_last=True,
    )
    level_labels = [f"{i} {name}" for i, name in enumerate(("none", *stats.level_names))]
    levels = row_chart(
        stats.level_counts,
        level_labels,
        f"Levels reached in {stats.id}",
        "How many notebooks reached each level: "
        + ", ".join(
            f"{label}: {c}" for label, c in zip(level_labels, stats.level_counts, strict=True)
        ),
    )
    out = [
        f'<section id="{_anchor(stats.id)}" class="exercise">',
        f'<h2>{_e(stats.id)}<span class="title">{_e(stats.title)}</span></h2>',
        f'<ul class="figures">{"".join(figures)}</ul>',
        '<div class="charts">',
        f"<figure><figcaption>Scores</figcaption>{scores}</figure>",
        f"<figure><figcaption>Level reached (all tests of it and below passed)</figcaption>"
        f"{levels}</figure>",
        "</div>",
    ]
    return out + _tests_table(stats) + ["</section>"]


def _tests_table(stats: ExerciseStats) -> list[str]:
    missed = [t for t in stats.tests if t.passed < t.taken]
    out = ["<h3>Hardest tests</h3>"]
    if not missed:
        out.append(f'<p class="muted">Every notebook passed all {len(stats.tests)} tests.</p>')
        return out
    rows = []
    for test in missed[:_HARDEST]:
        bugs = "<br>".join(
            f'{_e(bug)} <span class="muted">({count})</span>' for bug, count in test.bugs
        )
        rows.append(
            "<tr>"
            f'<td data-label="test">{breakable(test.id)}'
            f'<br><small class="muted">{_e(test.description)}</small></td>'
            f'<td data-label="level" class="n">{test.level} <small class="muted">'
            f"{_e(test.level_name)}</small></td>"
            f'<td data-label="passed"><div class="rate"><div class="meter" aria-hidden="true">'
            f'<span style="width:{100 * test.rate:.0f}%"></span></div>'
            f"{test.passed} of {test.taken}</div></td>"
            f'<td data-label="most common likely bugs">{bugs or "<span class=muted>none known</span>"}</td>'
            "</tr>"
        )
    rest = len(stats.tests) - len(missed)
    more = len(missed) - _HARDEST
    note = []
    if more > 0:
        note.append(
            f"{more} more tests not passed by every notebook (the JSON and tests.csv list all)"
        )
    if rest:
        note.append(f"{rest} tests passed by every notebook")
    return [
        *out,
        '<div class="scroll"><table class="cards">',
        '<thead><tr><th scope="col">test</th><th scope="col" class="n">level</th>'
        '<th scope="col">passed</th><th scope="col">most common likely bugs (notebooks)</th>'
        "</tr></thead>",
        "<tbody>",
        *rows,
        "</tbody></table></div>",
        f'<p class="muted">{"; ".join(note)}.</p>' if note else "",
    ]


def _similar_section(
    cohort: Cohort, names: Mapping[str, str], slugs: Mapping[str, str]
) -> list[str]:
    compared = sum(e.compared for e in cohort.exercises)
    out = [
        '<section id="similar">',
        "<h2>Similar code</h2>",
        "<p class=\"muted\">Each notebook's own code (what is not the scaffold's) compared with "
        "every other notebook of its exercise and with the reference solution, names, comments, "
        "layout and the order of functions aside. A pair is listed at "
        f"{_percent(100 * cohort.threshold)} or more: the share of the smaller side's "
        "fingerprints the other side has. Independent solutions stay below it "
        "(docs/benchmarks.md). A listed pair is evidence to read, not a verdict.</p>",
    ]
    if not cohort.pairs:
        out.append(
            f"<p>No pair at {_percent(100 * cohort.threshold)} or more among the {compared} "
            "notebooks with enough code of their own to compare.</p>"
        )
        return out + ["</section>"]
    for pair in cohort.pairs:
        out += _pair(pair, cohort.code, names, slugs)
    return out + ["</section>"]


def _side_name(side: str, names: Mapping[str, str], slugs: Mapping[str, str]) -> str:
    if side == REFERENCE:
        return "the reference solution"
    name = breakable(names.get(side, side))
    return f'<a href="{href(slugs[side], "html")}">{name}</a>' if side in slugs else name


def _pair(
    pair: Pair,
    code: Mapping[str, Sequence[CodeLine]],
    names: Mapping[str, str],
    slugs: Mapping[str, str],
) -> list[str]:
    a, b = _side_name(pair.a, names, slugs), _side_name(pair.b, names, slugs)
    summary = (
        f"<b>{_percent(100 * pair.similarity)}</b> · {a} and {b} "
        f'<span class="muted">({_e(pair.exercise)}; {_percent(100 * pair.a_share)} of the first\'s '
        f"fingerprints in the second, {_percent(100 * pair.b_share)} the other way)</span>"
    )
    sides = []
    for side, label, spans in (
        (pair.a, a, [m.a for m in pair.matches]),
        (pair.b, b, [m.b for m in pair.matches]),
    ):
        lines = code.get(side, ())
        sides.append(
            f'<div class="side"><h4>{label}</h4><pre>{_code_lines(lines, spans)}</pre></div>'
        )
    return [
        '<details class="pair">',
        f"<summary>{summary}</summary>",
        f'<div class="sides">{"".join(sides)}</div>',
        "</details>",
    ]


def _code_lines(lines: Sequence[CodeLine], spans: Sequence[tuple[int, int]]) -> str:
    """The side's own code, one span per line, prefixed by cell:line, the matching lines
    marked; where it has no code here (the reference, in a merged report), a note."""
    if not lines:
        return "<i>(its code is not in this report)</i>"
    marked = {i for first, last in spans for i in range(first, last + 1)}
    out = []
    for i, line in enumerate(lines[:_SHOWN_LINES]):
        cls = ' class="m"' if i in marked else ""
        out.append(f"<span{cls}><i>{line.cell}:{line.line:<4}</i>{_e(line.text)}</span>")
    if len(lines) > _SHOWN_LINES:
        out.append(f"<span><i>… {len(lines) - _SHOWN_LINES} more lines</i></span>")
    return "".join(out)


def notebook_row(
    outcome: Outcome, name: str, slug: str, with_notebook: bool, trouble: Sequence[str]
) -> str:
    """The notebooks table's row: the name (linking its card, and the executed notebook),
    the exercise, the score (sorted as a percentage), the level, the time, what went wrong."""
    report = outcome.report
    link = f'<a href="{href(slug, "html")}">{breakable(name)}</a>'
    if with_notebook:
        link += f'<br><small><a href="{href(slug, "ipynb")}">executed notebook</a></small>'
    why = "<br>".join(_e(line) for line in trouble)
    cells = [f'<td class="name" data-label="notebook" data-v="{_e(name)}">{link}</td>']
    if report is None:
        cells += [
            '<td data-label="exercise" data-v=""></td>',
            '<td class="n" data-label="score" data-v="-1">error</td>',
            '<td class="n" data-label="level" data-v="-1">–</td>',
            '<td class="n" data-label="time" data-v="-1">–</td>',
            f'<td data-label="what went wrong" class="bad">{why}</td>',
        ]
        return f'<tr class="error">{"".join(cells)}</tr>'
    percent = 100 * report.score / report.max_score if report.max_score else 0.0
    cells += [
        f'<td data-label="exercise" data-v="{_e(report.exercise)}">{_e(report.exercise)}</td>',
        f'<td class="n" data-label="score" data-v="{percent:.3f}">'
        f'{report.score:g}/{report.max_score:g} <small class="muted">({_percent(percent)})</small></td>',
        f'<td class="n" data-label="level" data-v="{report.level_reached}">{report.level_reached}</td>',
        f'<td class="n" data-label="time" data-v="{report.duration_s:.3f}">{report.duration_s:.1f} s</td>',
        f'<td data-label="what went wrong">{why}</td>',
    ]
    kind = "full" if report.full_marks else "lost"
    return f'<tr class="{kind}">{"".join(cells)}</tr>'
