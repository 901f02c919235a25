"""A solver back-end or extra that is not installed ends a command with ONE line naming
what to install (exit 2), wherever it can be chosen: ``themis auction``, ``themis sim``,
``themis standalone`` and the YARN engine. The missing packages are simulated: their
entries in ``sys.modules`` set to None, which makes every import of them fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from themis.cli import main

ROOT = Path(__file__).resolve().parents[2]
CPSAT = "pip install 'themis-yarn[cpsat]'"
GUROBI = "pip install 'themis-yarn[gurobi]'"
TRAIN = "pip install 'themis-yarn[train]'"
DOC = {"gpus": [{"id": f"g{i}", "machine": f"m{i // 2}", "rack": "r0"} for i in range(4)],
       "apps": [{"id": "a", "rho": 4, "bids": [{"gpus": ["g0", "g1"], "rho": 1}]}]}


def hide(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """``import name`` (or of any submodule) fails in this process until the test ends."""
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        monkeypatch.setitem(sys.modules, key, None)
    monkeypatch.setitem(sys.modules, name, None)


def hide_gurobi(monkeypatch: pytest.MonkeyPatch) -> None:
    """No gurobipy: the back-end module decides at import, so it is imported afresh (the
    original is put back afterwards)."""
    import themis.mechanism.solvers
    import themis.mechanism.solvers.gurobi as real

    hide(monkeypatch, "gurobipy")
    monkeypatch.delitem(sys.modules, real.__name__)
    monkeypatch.setattr(themis.mechanism.solvers, "gurobi", real)  # re-bound by the import


def one_line(err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, err)


@pytest.fixture
def auction_input(tmp_path: Path) -> Path:
    path = tmp_path / "in.json"
    path.write_text(json.dumps(DOC))
    return path


def test_auction_cpsat_without_ortools(monkeypatch: pytest.MonkeyPatch, auction_input: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    hide(monkeypatch, "ortools")
    assert main(["auction", str(auction_input), "--solver", "cpsat"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    one_line(err, "themis auction:", "cpsat needs OR-Tools", CPSAT)


def test_auction_gurobi_without_gurobipy(monkeypatch: pytest.MonkeyPatch, auction_input: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    hide_gurobi(monkeypatch)
    assert main(["auction", str(auction_input), "--solver", "gurobi"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    one_line(err, "themis auction:", "gurobi needs gurobipy", GUROBI)
    # auto does not need it: HiGHS takes over
    assert main(["auction", str(auction_input), "--solver", "auto"]) == 0
    assert json.loads(capsys.readouterr().out)["solver"] == "highs"


def test_auction_gurobi_without_a_licence(monkeypatch: pytest.MonkeyPatch,
                                          auction_input: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("gurobipy")
    bad = tmp_path / "gurobi.lic"
    bad.write_text("not a licence\n")
    monkeypatch.setenv("GRB_LICENSE_FILE", str(bad))
    assert main(["auction", str(auction_input), "--solver", "gurobi"]) == 2
    one_line(capsys.readouterr().err, "themis auction:", "gurobi: no usable licence",
             "GRB_LICENSE_FILE")


def test_sim_cpsat_without_ortools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    hide(monkeypatch, "ortools")
    out_dir = tmp_path / "out"
    code = main(["sim", "--out", str(out_dir), "--policies", "themis", "--solver", "cpsat",
                 "--no-progress"])
    assert code == 2
    one_line(capsys.readouterr().err, "themis sim: error:", CPSAT)
    assert not out_dir.exists()  # failed before simulating anything


def test_sim_gurobi_without_gurobipy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    hide_gurobi(monkeypatch)
    code = main(["sim", "--out", str(tmp_path / "out"), "--solver", "gurobi", "--no-progress"])
    assert code == 2
    one_line(capsys.readouterr().err, "themis sim: error:", GUROBI)


def test_standalone_cpsat_without_ortools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    hide(monkeypatch, "ortools")
    code = main(["standalone", "--out", str(tmp_path / "out"), "--solver", "cpsat"])
    assert code == 2
    one_line(capsys.readouterr().err, "themis standalone: error: --solver:", CPSAT)


@pytest.mark.parametrize("absent", [("tensorflow",), ("tensorboard",),
                                    ("tensorflow", "tensorboard")])
def test_standalone_without_train(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str],
                                  absent: tuple[str, ...]) -> None:
    for name in absent:
        hide(monkeypatch, name)
    assert main(["standalone", "--out", str(tmp_path / "out")]) == 2
    one_line(capsys.readouterr().err, "themis standalone: error:",
             f"{' and '.join(absent)} {'is' if len(absent) == 1 else 'are'} not installed",
             TRAIN)


def test_engine_solver_without_ortools(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The RM passes its solver setting as THEMIS_SOLVER: the engine refuses to start, in
    one line (the RM plugin logs the engine's last lines and its exit code)."""
    from themis.yarn.engine import main as engine_main

    hide(monkeypatch, "ortools")
    monkeypatch.setenv("THEMIS_SOLVER", "cpsat")
    assert engine_main(["--port", "1", "--token", "t"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    one_line(err, "themis.yarn.engine: solver 'cpsat' (yarn.resourcemanager.themis.solver)",
             CPSAT)


def test_engine_round_naming_a_missing_solver_logs_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A round whose view names a solver that is not installed: an empty grant list with
    the reason, and one log line (no traceback)."""
    from themis.yarn.engine import Py4JEngine
    from themis.yarn.rounds import RoundEngine

    hide(monkeypatch, "ortools")
    view = {"round": 1, "now_ms": 0, "fairness_knob": 0.8, "lease_duration_ms": 600000,
            "solver": "cpsat",
            "nodes": [{"node_id": "h:1", "host": "h", "rack": "/r0", "total_gpus": 2,
                       "free_gpus": 2}],
            "apps": [{"app_id": "application_1_0001", "queue": "default", "user": "u",
                      "pending_gpus": 1, "running_gpus": {}}],
            "leases": []}
    with caplog.at_level("ERROR", logger="themis.yarn.engine"):
        reply = json.loads(Py4JEngine(RoundEngine()).runRound(json.dumps(view)))
    assert reply["grants"] == [] and CPSAT in reply["error"], reply
    records = [r for r in caplog.records if r.name == "themis.yarn.engine"]
    assert len(records) == 1 and records[0].exc_info is None


def test_python_dash_m_themis_cpsat_without_ortools(auction_input: Path) -> None:
    """The same in a real process started as ``python -m themis``."""
    code = ("import sys, runpy\n"
            "sys.modules['ortools'] = None\n"
            "sys.argv = ['themis', 'auction', sys.argv[1], '--solver', 'cpsat']\n"
            "runpy.run_module('themis', run_name='__main__', alter_sys=True)\n")
    done = subprocess.run([sys.executable, "-c", code, str(auction_input)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    one_line(done.stderr, "themis auction:", CPSAT)
