"""Everything the grader writes about a grading: the report card and the other formats.

card        render (the rich card), to_json, to_junit, to_gradescope, to_markdown, to_html,
            for_candidate (the --reveal view)
progress    the live line and summary table of a batch

documents   to_csv, to_junit_batch: one document for the cohort, in canonical order
            (`sort_outcomes`: by notebook path)
cohort      make_cohort: each exercise's figures and the similar pairs (similarity);
            to_json_batch (`--json` of a batch), tests_csv, pairs_csv
cohort_page index.html; charts its pictures; theme the card's page in light and dark
merge       merge_texts: shards' documents joined into what one run would have written
folders     write_gradescope_folder, write_output_dir: files per notebook, named by `slugs`
executed    executed_notebook: the candidate's notebook with the grading's outputs
"""

from __future__ import annotations

from grader.report.documents import (
    COLUMNS,
    notebook_of,
    sort_outcomes,
    to_csv,
    to_junit_batch,
)
from grader.report.executed import executed_notebook
from grader.report.folders import slugs, write_gradescope_folder, write_output_dir
from grader.report.merge import merge_texts

__all__ = [
    "COLUMNS",
    "executed_notebook",
    "merge_texts",
    "notebook_of",
    "slugs",
    "sort_outcomes",
    "to_csv",
    "to_junit_batch",
    "write_gradescope_folder",
    "write_output_dir",
]
