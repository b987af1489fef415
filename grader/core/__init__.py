"""The data a grading produces and the vocabulary every package shares; imports nothing
else of the grader's.

errors    GraderError and its kinds, ExitCode
limits    Limits: every time, size and count a grading is held to
outcomes  Status, and the candidate outcomes a check raises (Failed, CallTimeout, ...)
results   GradeReport, CheckResult, Outcome, LevelSummary: frozen results as data
records   Finding: what the kernel's record channel saw during a grading
text      printable and encodable text for every format
imports   which packages a notebook may import
project   where the project's files are (the checkout or the installed package)
"""
