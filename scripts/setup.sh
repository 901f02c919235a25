#!/usr/bin/env bash
# Install everything the Python side needs (idempotent). Usage: scripts/setup.sh [extras]
# extras: comma-separated pyproject extras, default "dev,train".
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev,train}"
PY="${PYTHON:-python3}"
"$PY" -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
# Extras that are not declared (yet) are dropped with a note rather than failing.
declared=$("$PY" - <<'PYEOF'
import tomllib
print(",".join(tomllib.load(open("pyproject.toml", "rb"))["project"].get("optional-dependencies", {})))
PYEOF
)
want=""
IFS=, read -ra parts <<<"$extras"
for e in "${parts[@]}"; do
  if [[ ",$declared," == *",$e,"* ]]; then want="${want:+$want,}$e"; else echo "setup: extra '$e' not declared, skipped"; fi
done
"$PY" -m pip install --quiet --disable-pip-version-check -e ".${want:+[$want]}"
echo "setup: python package installed (extras: ${want:-none})"
