"""The ``themis`` command: one sub-command per task (``themis --help`` lists them)."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from themis import __version__

#: sub-command modules; each exposes ``add_parser(subparsers)``. Optional ones are skipped
#: when their module is not installed in this build.
SUBCOMMANDS = (
    "themis.arbiter.cli_auction",
    "themis.sim.cli",
    "themis.preview.cli",
    "themis.client.cli",
    "themis.client.logs",
    "themis.standalone",
    "themis.doctor",
)


class _Version(argparse.Action):
    """``--version``: the version on stdout, and on stderr one line naming the compiled
    parts that are missing (pure-Python fall-backs; ``themis doctor`` says more)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from themis.compiled import missing

        print(f"themis {__version__}")
        absent = missing()
        if absent:
            print(f"themis: compiled parts missing (pure-Python fall-backs, slower): "
                  f"{', '.join(p.module for p in absent)}; see `themis doctor`",
                  file=sys.stderr)
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="themis",
        description="Themis on YARN: finish-time-fair GPU scheduling (NSDI 2020).",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print the version (and any missing compiled part) and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and name.startswith(exc.name):
                continue
            raise
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from themis.identity.http import AuthError

    try:
        return int(args.func(args))
    except AuthError as e:  # no or an expired Kerberos ticket: one line, what to do
        print(f"themis: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # stdout closed early (e.g. `themis ... | head`): not an error of ours; silence
        # the interpreter's flush at exit and end as a process killed by SIGPIPE would.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
