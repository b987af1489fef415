"""What an exercise author writes against: `Exercise`, `Check`, `Watch`, the check library,
the handle (`Kernel`) through which a check calls the candidate's code, the static scan, and
the mutation corpus. Nothing here runs a notebook.

exercise   Exercise, Check, Watch, the catalog of exercise folders, find_exercise
checks     assertions with messages that say what is wrong: close, equal, data, finite, ...
library    topic-free helpers: seeded inputs, state dicts, gradients vs autograd, causality,
           train/eval, raises, the from-scratch verdict
handle     Kernel and Remote: calls, attribute reads and sets, held values and batches in
           the candidate's kernel; answers back as tensors, plain data and references
integrity  the common checks on how an answer was produced (no built-in, clean source)
scan       the static scan of the candidate's cells
corpus     Mutant, Variant: single-bug copies of a reference and correct alternatives
"""
