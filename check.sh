#!/usr/bin/env bash
# Set up (a virtual environment in .venv, CPU torch) and run every check: the scaffolds are
# up to date, every solution earns full marks, and the whole test suite passes.
# Usage: bash check.sh [extra pytest arguments, e.g. -m "not slow"]
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt ".[test]"
.venv/bin/grade build --check
.venv/bin/python -m pytest "$@"
