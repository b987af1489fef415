#!/usr/bin/env bash
# Build benchmarks/.venv-extras: the grader as check.sh installs it (CPU torch pinned in
# constraints.txt), plus jupyter-server, which brings jsonschema's format-checker extras
# (rfc3987-syntax and friends) as JupyterLab, nbgrader or notebook do. Then:
#   .venv/bin/python benchmarks/bench_grade.py --bin benchmarks/.venv-extras/bin
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x benchmarks/.venv-extras/bin/python ] || "$PYTHON" -m venv benchmarks/.venv-extras
benchmarks/.venv-extras/bin/python -m pip install --quiet --disable-pip-version-check \
  -c constraints.txt -e . jupyter-server
