"""Test certificates: a self-signed server certificate for 127.0.0.1 made with openssl."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def self_signed(dirpath: Path, name: str = "server") -> tuple[Path, Path]:
    """(certificate, private key) PEM files valid for IP 127.0.0.1 and host localhost."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed (needed to make a test certificate)")
    cert, key = dirpath / f"{name}.crt", dirpath / f"{name}.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert),
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True)
    return cert, key
