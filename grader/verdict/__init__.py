"""From what a grading gathered to its verdict, with no I/O and no kernel: voiding a
grading whose notebook reached for the grader, level summaries, the report itself, the
root cause of a cascade of failures, and the known bug a failure pattern matches.

score      void, summarise (levels and the level reached), headlines of cell errors
build      build_report: every check's result, the cells and findings -> GradeReport
diagnosis  root_cause, hints (known bugs from an exercise's hints.json), looks_like_another
"""
