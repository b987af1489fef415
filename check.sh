#!/usr/bin/env bash
# Set up (a virtual environment in .venv, CPU torch) and run every check: the scaffolds are
# up to date, every solution earns full marks, and the whole test suite passes.
# Usage: bash check.sh [extra pytest arguments, e.g. -m "not slow"]
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
# --sandbox needs Debian's bubblewrap; its tests are skipped where it cannot be installed.
if ! command -v bwrap >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
    || echo "check.sh: could not install bubblewrap; the sandbox tests will be skipped" >&2
fi
# The cohort's pages are opened in Debian's Chromium (tests/test_browser.py, skipped without).
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "check.sh: could not install chromium; the browser tests will be skipped" >&2
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# editable: an edit to an exercise is graded at once (see "Write your own exercise")
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[test]"
.venv/bin/ruff format --check --quiet grader exercises tests benchmarks
.venv/bin/ruff check --quiet grader exercises tests benchmarks
.venv/bin/mypy
.venv/bin/grade build --check
.venv/bin/python -m pytest "$@"
