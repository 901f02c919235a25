#!/usr/bin/env bash
# Refresh requirements/lock.txt: every package of the project and all its extras, resolved
# once to one consistent set for Linux x86_64 and Python 3.11, inside pyproject.toml's
# ranges and requirements/constraints.in. Usage: scripts/lock.sh [--upgrade]
# (without --upgrade, versions already in the lock are kept where they still fit).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
"$PY" -m pip install --quiet --disable-pip-version-check "uv==$(cat requirements/uv.version)"
"$PY" -m uv pip compile pyproject.toml --all-extras \
  -c requirements/constraints.in \
  --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
  --custom-compile-command "scripts/lock.sh" \
  -o requirements/lock.txt "$@"
