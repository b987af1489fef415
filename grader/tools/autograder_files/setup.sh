#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu):
# Python 3.10+ from apt, a venv in /opt/grader, torch's CPU build (the pin in
# grader-src/constraints.txt), then the grader from the copy of its source in this zip.
# Written by `grade gradescope`.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VENV=/opt/grader
TORCH=@TORCH@
EXERCISES_DIR=@EXERCISES_DIR@ # extra exercise folders bundled in this zip, or empty
export DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

newest_python() { # the first Python >= 3.10 on PATH that can make a venv, or nothing
  local candidate
  for candidate in python3.13 python3.12 python3.11 python3.10 python3; do
    if command -v "$candidate" >/dev/null &&
      "$candidate" -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  return 0
}

apt-get update
apt-get install -y --no-install-recommends ca-certificates python3 python3-venv python3-pip
PYTHON=$(newest_python)
if [ -z "$PYTHON" ]; then # Ubuntu 20.04 and older ship Python 3.8 or 3.9
  apt-get install -y --no-install-recommends software-properties-common gpg-agent
  add-apt-repository -y ppa:deadsnakes/ppa
  apt-get update
  apt-get install -y --no-install-recommends python3.11 python3.11-venv
  PYTHON=$(newest_python)
fi
if [ -z "$PYTHON" ]; then
  echo "setup.sh: could not install Python 3.10 or newer with venv" >&2
  exit 1
fi

"$PYTHON" -m venv "$VENV"
# torch first, from PyTorch's CPU index: from PyPI the same pin is the multi-GB CUDA build.
# The constraint torch==X below is then met by the X+cpu build already installed.
"$VENV/bin/pip" install --index-url https://download.pytorch.org/whl/cpu "torch==$TORCH"
"$VENV/bin/pip" install -c "$HERE/grader-src/constraints.txt" "$HERE/grader-src"

# The candidate's code runs as this user (run_autograder passes --kernel-user): it can
# neither read the autograder's source nor write its scripts or results.
id -u grader-kernel >/dev/null 2>&1 ||
  useradd --system --no-create-home --shell /usr/sbin/nologin grader-kernel
# The sandbox, where the image allows it (each grading says whether it was sandboxed).
apt-get install -y --no-install-recommends bubblewrap || true

# Fail the image build now rather than at the first submission.
flags=()
if [ -n "$EXERCISES_DIR" ]; then
  flags=(--exercises "$HERE/$EXERCISES_DIR")
fi
"$VENV/bin/grade" list "${flags[@]}"
