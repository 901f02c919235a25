#!/usr/bin/env bash
# Install the Python package and its extras from the committed lock (idempotent).
# Usage: scripts/setup.sh [extras]      extras: comma-separated pyproject extras, default "dev,train".
# Every dependency comes at the version in requirements/lock.txt (refresh: scripts/lock.sh);
# THEMIS_UNLOCKED=1 installs the newest versions pyproject.toml allows instead (scripts/drift.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev,train}"
PY="${PYTHON:-python3}"
"$PY" -m pip install --quiet --disable-pip-version-check "uv==$(cat requirements/uv.version)"
declared=$("$PY" - <<'PYEOF'
import tomllib
print(",".join(tomllib.load(open("pyproject.toml", "rb"))["project"].get("optional-dependencies", {})))
PYEOF
)
want=""
IFS=, read -ra parts <<<"$extras"
for e in "${parts[@]}"; do
  [[ -z "$e" ]] && continue
  if [[ ",$declared," != *",$e,"* ]]; then
    echo "setup: unknown extra '$e' (declared: $declared)" >&2; exit 2
  fi
  want="${want:+$want,}$e"
done
# python-gssapi (requests-gssapi: the dev and kerberos extras) builds against MIT Kerberos
# (and the dev extra's secure mini-cluster tests use kinit): idempotent, quick when present
if [[ ",$want," == *",dev,"* || ",$want," == *",kerberos,"* ]]; then
  bash scripts/krb5-setup.sh
fi
# uv installs into this interpreter's environment (a venv when one is active).
target=(--python "$("$PY" -c 'import sys; print(sys.executable)')")
if [[ "${THEMIS_UNLOCKED:-0}" == "1" ]]; then
  pins=(--upgrade)
  what="newest versions allowed by pyproject.toml"
else
  pins=(-c requirements/lock.txt)
  what="locked versions (requirements/lock.txt)"
fi
"$PY" -m uv pip install --quiet "${target[@]}" "${pins[@]}" -e ".${want:+[$want]}"
echo "setup: python package installed with extras '${want:-none}' at the $what"
# The compiled parts are optional at build time (no C compiler: pure-Python fall-backs,
# ~10x slower auctions); say so here rather than letting it go unnoticed.
"$PY" -m themis doctor --brief >&2 || true
