"""Commands whose standard output is data print nothing else there, whatever the solver
libraries print (highspy 1.16 writes HiGHS' banner to fd 1 when a model is created):
each command runs as a subprocess and its stdout is parsed whole (themis.stdio)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from ._http import serving

ROOT = Path(__file__).resolve().parents[2]
AUCTION = str(ROOT / "examples" / "auction.json")

# A -c program that runs the ``themis`` command after making FUNCTION in MODULE chatter
# first: C's printf (buffered: a pipe is not a terminal), a raw write to fd 1 and print()
_NOISY = """
import ctypes, importlib, os, sys
module, function = sys.argv[1:3]
del sys.argv[1:3]
m = importlib.import_module(module)
real = getattr(m, function)
def noisy(*a, **k):
    ctypes.CDLL(None).printf(b"chatter from C\\n")
    os.write(1, b"chatter on fd 1\\n")
    print("chatter from Python")
    return real(*a, **k)
setattr(m, function, noisy)
from themis.cli import main
sys.exit(main())
"""
CHATTER = ("chatter from C", "chatter on fd 1", "chatter from Python")


def themis(*args: str, noisy: tuple[str, str] | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``themis ARGS`` in a new interpreter (``noisy``: (module, function) made to chatter)."""
    cmd = [sys.executable, "-m", "themis.cli"] if noisy is None else \
        [sys.executable, "-c", _NOISY, *noisy]
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_stdout_to_stderr_moves_every_kind_of_write_and_nests() -> None:
    program = """
import ctypes, os, threading
from themis.stdio import stdout_to_stderr
print("before")
with stdout_to_stderr():
    ctypes.CDLL(None).printf(b"from C\\n")
    with stdout_to_stderr():
        os.write(1, b"on fd 1\\n")
    print("from Python")
    t = threading.Thread(target=lambda: os.write(1, b"from a thread\\n"))
    t.start(); t.join()
print("after")
"""
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "before\nafter\n"
    for line in ("from C", "on fd 1", "from Python", "from a thread"):
        assert line in proc.stderr


@pytest.mark.parametrize("solver", ["highs", "auto", "open-fast", "lpbb"])
def test_auction_prints_only_json(solver: str) -> None:
    proc = themis("auction", AUCTION, "--solver", solver)
    doc = json.loads(proc.stdout)
    assert doc["solver"] and doc["allocation"]


def test_auction_prints_only_json_whatever_the_solving_prints() -> None:
    proc = themis("auction", AUCTION, "--solver", "highs", "--indent", "0",
                  noisy=("themis.arbiter.cli_auction", "run"))
    assert json.loads(proc.stdout)["allocation"]
    assert all(line in proc.stderr for line in CHATTER)


def test_highs_model_creation_prints_nothing() -> None:
    """The banner highspy 1.16 prints from ``Highs()`` is not printed (highs.new_highs)."""
    program = ("from themis.mechanism.solvers.highs import PackingLp\n"
               "from themis.mechanism.solvers.base import Bundle, PackingProblem\n"
               "PackingLp(PackingProblem(1, ((Bundle(1, 1.0),),))).highs(integer=True).run()\n"
               "print('done')\n")
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "done\n"
    assert "HiGHS" not in proc.stderr


_SIM = ("sim", "--policies", "themis", "--max-apps", "4", "--cluster", "default:0.125",
        "--no-progress")
_SIM_LINE = re.compile(r"^themis\s+max_rho=\S+ ")


@pytest.mark.parametrize("noisy", [None, ("themis.sim.cli", "simulate")])
def test_sim_prints_only_its_result_lines(tmp_path: Path, noisy: tuple[str, str] | None) -> None:
    proc = themis(*_SIM, "--out", str(tmp_path), noisy=noisy)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and _SIM_LINE.match(lines[0]), proc.stdout
    assert json.loads((tmp_path / "summary.json").read_text())["policies"]["themis"]
    if noisy:
        assert all(line in proc.stderr for line in CHATTER)


APP = {"id": "application_1_0001", "name": "demo", "state": "RUNNING",
       "finalStatus": "UNDEFINED", "applicationType": "THEMIS"}
STATUS = {"app_id": APP["id"], "rho": 1.2, "gpus": {"count": 2, "by_node": {"n1": 2}},
          "jobs": []}


class _FakeRm(BaseHTTPRequestHandler):
    """The RM's REST calls ``themis status`` makes, for one running app."""

    def do_GET(self) -> None:  # http.server's name
        path = self.path.split("?")[0]
        doc: Any = {
            "/ws/v1/cluster/apps": {"apps": {"app": [APP]}},
            f"/ws/v1/cluster/apps/{APP['id']}": {"app": APP},
            f"/proxy/{APP['id']}/status": STATUS,
        }.get(path)
        body = json.dumps(doc).encode()
        self.send_response(200 if doc is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body) if doc is not None else 0))
        self.end_headers()
        if doc is not None:
            self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def rm_url() -> Iterator[str]:
    with serving(_FakeRm) as url:
        yield url


@pytest.mark.parametrize("one_app", [False, True])
def test_status_json_prints_only_json(rm_url: str, one_app: bool) -> None:
    args = ["status", *([APP["id"]] if one_app else []), "--json", "--rm", rm_url,
            "--webhdfs", rm_url]
    doc = json.loads(themis(*args, timeout=60).stdout)
    first = doc if one_app else doc[0]
    assert first["app"]["id"] == APP["id"] and first["status"]["rho"] == 1.2
