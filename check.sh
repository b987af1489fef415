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
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# editable: an edit to an exercise is graded at once (see "Write your own exercise")
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[test]"
# The static checks (formatting, lint, types, scaffolds and hints up to date) run beside the
# tests: they use one core, and the tests leave some of the second idle. Their output is
# printed after the tests'; either failing fails the check.
static() {
  .venv/bin/ruff format --check --quiet grader exercises tests benchmarks
  .venv/bin/ruff check --quiet grader exercises tests benchmarks
  .venv/bin/mypy
  .venv/bin/grade build --check
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
static >"$log" 2>&1 &
static_pid=$!
tests=0
.venv/bin/python -m pytest "$@" || tests=$?
checks=0
wait "$static_pid" || checks=$?
cat "$log"
if [ "$checks" -ne 0 ]; then
  echo "check.sh: the static checks failed (above)" >&2
  exit "$checks"
fi
exit "$tests"
