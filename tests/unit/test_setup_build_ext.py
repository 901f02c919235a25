"""setup.py: an optional C extension that does not compile is reported in a banner at the
end of the build, which still succeeds (the pure-Python fall-backs take over)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from themis import compiled

ROOT = Path(__file__).resolve().parents[2]


def test_extensions_that_do_not_compile_end_the_build_with_a_banner(tmp_path: Path) -> None:
    env = {**os.environ, "CC": "false"}  # a "compiler" that always fails
    done = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
         "--build-temp", str(tmp_path / "tmp")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    banner = done.stderr[done.stderr.index("themis-yarn: WARNING"):]
    assert f"{len(compiled.PARTS)} optional C extension(s) NOT built" in banner
    for part in compiled.PARTS:
        assert f"  {part.module}: " in banner
    assert "C compiler" in banner and "themis doctor" in banner
    assert not list((tmp_path / "lib").rglob("*.so"))
