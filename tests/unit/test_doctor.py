"""``themis doctor``, ``themis --version``, ``python -m themis`` and the one warning a
process logs when it falls back from a missing compiled part."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from themis import __version__, compiled, doctor
from themis.cli import main

ROOT = Path(__file__).resolve().parents[2]
CHECK_KEYS = {"group", "name", "ok", "detail", "fix", "required", "version", "status",
              "problem"}


def hide(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make ``import name`` (and its submodules) fail in this process, as if it were not
    installed; monkeypatch puts the real modules back afterwards."""
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        monkeypatch.setitem(sys.modules, key, None)
    monkeypatch.setitem(sys.modules, name, None)


def doctor_json(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    rc = main(["doctor", "--json", *extra])
    out = capsys.readouterr().out
    return rc, json.loads(out)


def by_name(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["group"], c["name"]): c for c in doc["checks"]}


def test_json_is_only_json_and_lists_every_part() -> None:
    """A real process: stdout is one JSON document (no licence chatter from Gurobi's C
    library, which an in-process capture would not see), with every group of checks."""
    done = subprocess.run([sys.executable, "-m", "themis", "doctor", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert set(doc) == {"version", "python", "ok", "problems", "checks"}
    assert doc["version"] == __version__
    assert doc["problems"] == sum(c["problem"] for c in doc["checks"])
    assert doc["ok"] == (doc["problems"] == 0)
    for c in doc["checks"]:
        assert set(c) == CHECK_KEYS, c
        assert c["status"] in ("ok", "missing", "absent")
        assert c["problem"] == (c["status"] == "missing")
        assert c["ok"] or c["fix"], c  # whatever is not there says how to add it
    names = by_name(doc)
    assert {n for g, n in names if g == "compiled"} == {p.module for p in compiled.PARTS}
    assert {n for g, n in names if g == "solver"} == {"highs", "lpbb", "bnb", "cpsat",
                                                      "gurobi"}
    assert {n for g, n in names if g == "extra"} == set(doctor.EXTRAS)
    assert {n for g, n in names if g == "tool"} == {"java", "mvn"}
    assert {n for g, n in names if g == "jar"} == {"rm-plugin", "submarine-am"}


def test_missing_compiled_part_is_a_problem(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    hide(monkeypatch, "themis.mechanism._menu")
    monkeypatch.setattr(doctor, "check_tools", lambda: [])  # not what this test is about
    rc, doc = doctor_json(capsys)
    assert rc == 0  # without --strict
    menu = by_name(doc)[("compiled", "themis.mechanism._menu")]
    assert menu["status"] == "missing" and menu["problem"] and not menu["ok"]
    assert "4-5x slower" in menu["detail"]
    assert menu["fix"] == compiled.FIX
    assert not doc["ok"] and doc["problems"] >= 1

    assert main(["doctor", "--brief", "--strict"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any("themis.mechanism._menu: missing" in ln and "C compiler" in ln for ln in lines)
    assert all(ln.startswith("themis doctor: ") for ln in lines)


def test_brief_prints_nothing_when_all_is_well(capsys: pytest.CaptureFixture[str]) -> None:
    if compiled.missing():
        pytest.skip("this build lacks compiled parts")
    checks = doctor.run_checks(optional=False)
    if any(c.problem for c in checks):
        pytest.skip(f"this environment has a problem: {[c.brief() for c in checks]}")
    assert main(["doctor", "--brief", "--strict"]) == 0
    assert capsys.readouterr().out == ""


def test_missing_solver_and_extra_are_listed_but_no_problem(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hide(monkeypatch, "ortools")
    hide(monkeypatch, "gurobipy")
    monkeypatch.setattr(doctor, "check_tools", lambda: [])
    monkeypatch.setattr(doctor, "check_jars", lambda: [])
    _, doc = doctor_json(capsys)
    names = by_name(doc)
    cpsat = names[("solver", "cpsat")]
    assert cpsat["status"] == "absent" and cpsat["fix"] == "pip install 'themis-yarn[cpsat]'"
    gurobi = names[("solver", "gurobi")]
    assert gurobi["status"] == "absent" and gurobi["fix"] == "pip install 'themis-yarn[gurobi]'"
    assert names[("extra", "cpsat")]["status"] == "absent"
    # dev holds OR-Tools too: a dev extra without it is half installed, a problem
    assert names[("extra", "dev")]["status"] in ("missing", "absent")
    assert "ortools" in names[("extra", "dev")]["detail"] or \
        names[("extra", "dev")]["detail"] == "not installed"


def test_gurobi_without_a_licence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("gurobipy")
    bad = tmp_path / "gurobi.lic"
    bad.write_text("not a licence\n")
    monkeypatch.setenv("GRB_LICENSE_FILE", str(bad))
    check = doctor.check_gurobi()
    assert not check.ok and not check.problem
    assert "no usable licence" in check.detail and "GRB_LICENSE_FILE" in check.fix


def test_extras_table_matches_pyproject() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    assert set(doctor.EXTRAS) == set(declared)
    for extra, reqs in declared.items():
        names = {norm(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]) for r in reqs}
        assert names == {norm(d) for d, _ in doctor.EXTRAS[extra]}, extra


def test_version(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out, err = capsys.readouterr()
    assert out == f"themis {__version__}\n"
    assert err == "" or compiled.missing()

    hide(monkeypatch, "themis.mechanism.solvers._separation")
    with pytest.raises(SystemExit):
        main(["--version"])
    out, err = capsys.readouterr()
    assert out == f"themis {__version__}\n"
    assert len(err.splitlines()) == 1 and "themis.mechanism.solvers._separation" in err


def test_python_dash_m_themis() -> None:
    done = subprocess.run([sys.executable, "-m", "themis", "--version"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 0 and done.stdout == f"themis {__version__}\n"


def test_fall_back_warns_once_per_process(monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    from themis.mechanism import bids
    from themis.mechanism.topology import Gpu

    hide(monkeypatch, "themis.mechanism._menu")
    monkeypatch.setattr(bids, "_menu", None)
    monkeypatch.setattr(compiled, "_warned", False)
    offer = [Gpu(f"g{i}", "m0", "r0") for i in range(4)]
    with caplog.at_level(logging.WARNING, logger="themis.compiled"):
        for _ in range(3):
            assert bids.OfferIndex(offer).native is None
    records = [r for r in caplog.records if r.name == "themis.compiled"]
    assert len(records) == 1
    text = records[0].getMessage()
    assert "themis.mechanism._menu" in text and "4-5x slower" in text and compiled.FIX in text
    assert "\n" not in text


def test_auction_without_compiled_parts_warns_in_one_line(tmp_path: Path) -> None:
    """A process without any compiled part: the auction runs (pure-Python fall-backs),
    stdout is its JSON, stderr one warning line naming every missing part."""
    doc = {"gpus": [{"id": f"g{i}", "machine": f"m{i // 2}", "rack": "r0"} for i in range(4)],
           "apps": [{"id": "a", "rho": 4, "bids": [{"gpus": ["g0", "g1"], "rho": 1}]},
                    {"id": "b", "rho": 3, "bids": [{"gpus": ["g1", "g2"], "rho": 1.5}]}]}
    path = tmp_path / "in.json"
    path.write_text(json.dumps(doc))
    parts = [p.module for p in compiled.PARTS]
    code = ("import sys, runpy\n"
            f"for n in {parts!r}: sys.modules[n] = None\n"
            "sys.argv = ['themis', 'auction', sys.argv[1], '--solver', 'lpbb']\n"
            "runpy.run_module('themis', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["solver"] == "lpbb"
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "WARNING themis.compiled" in lines[0]
    assert all(p in lines[0] for p in parts) and "C compiler" in lines[0]
