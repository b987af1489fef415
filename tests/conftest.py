import os

# Tests grade through subprocesses; make sure they import this checkout's grader.
os.environ.setdefault("PYTHONPATH", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
