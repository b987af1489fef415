"""From check results to a verdict, with no I/O and no kernel: voiding, level summaries,
the exit code, the root cause of a cascade of failures, and the known bug a failure
pattern matches.

diagnosis  root_cause, hints (known bugs from an exercise's hints.json), looks_like_another
"""
