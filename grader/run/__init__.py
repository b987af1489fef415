"""Running a grading: the pipeline that owns one, the runner of hidden checks, reading
notebooks, the catalog index, the batch of many notebooks, and signal handling.

pipeline   grade(notebook, ctx), grade_notebook: read, find the exercise, run the cells,
           run the hidden checks, build the report
runner     run_checks: capture each check's outcome, then classify it
notebook   read_notebook: a file into cells, with clear errors for what is not a notebook
catalog    the index `grade list` reads, and the digest of a suite's sources
batch      grade_all: many notebooks, N at a time, one kernel each
inprocess  InProcessSession: the same calls in this process (for authors' quick checks)
profile    --profile: time and peak memory of the candidate's code against torch's
signals    stopping cleanly on SIGINT and SIGTERM
"""
