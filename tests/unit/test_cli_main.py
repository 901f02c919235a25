"""The ``themis`` entry point: a reader that closes stdout early is not an error."""

from __future__ import annotations

import subprocess
import sys

# A sub-command that writes more than a pipe holds to a stdout nobody reads any more.
_PROGRAM = """
import sys
import themis.cli as cli
real = cli.build_parser
def build_parser():
    p = real()
    def flood(args):
        for _ in range(100_000):
            print("x" * 100)
        return 0
    p.set_defaults(func=flood)
    return p
cli.build_parser = build_parser
sys.exit(cli.main([]))
"""


def test_closed_stdout_ends_quietly_like_sigpipe() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _PROGRAM],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.read(1)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
    assert proc.returncode == 141
