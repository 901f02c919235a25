#!/usr/bin/env bash
# MIT Kerberos on this machine for the client side of a secure cluster: `kinit`/`kdestroy`
# (krb5-user) and the headers python-gssapi builds against (libkrb5-dev; the `kerberos` and
# `dev` extras: requests-gssapi). Debian packages; idempotent; needs root for apt-get.
set -euo pipefail
need=()
command -v kinit >/dev/null 2>&1 || need+=(krb5-user)
command -v krb5-config >/dev/null 2>&1 || need+=(libkrb5-dev)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
if ((${#need[@]} == 0)); then
  echo "krb5-setup: kinit, krb5-config and gcc present" >&2
  exit 0
fi
SUDO=()
[[ $(id -u) == 0 ]] || SUDO=(sudo)
echo "krb5-setup: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get install -y -q "${need[@]}" >/dev/null 2>&1 || {
  "${SUDO[@]}" apt-get update -q >/dev/null
  "${SUDO[@]}" apt-get install -y -q "${need[@]}" >/dev/null
}
echo "krb5-setup: installed ${need[*]}" >&2
