#!/usr/bin/env bash
# A headless browser on this machine for the tests that look at the HTML reports
# (`themis preview`'s report.html, tests/integration/test_stock_apps.py): Debian's chromium.
# Idempotent; needs root for apt-get (or sudo).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  echo "browser-setup: chromium present" >&2
  exit 0
fi
SUDO=()
[[ $(id -u) == 0 ]] || SUDO=(sudo)
echo "browser-setup: installing chromium" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || {
  "${SUDO[@]}" apt-get update -q >/dev/null
  "${SUDO[@]}" apt-get install -y -q --no-install-recommends chromium >/dev/null
}
echo "browser-setup: installed chromium" >&2
