"""``themis auction``: JSON in, JSON out; bad input exits 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from themis.cli import main

DOC: dict[str, Any] = {
    "gpus": [{"id": f"g{i}", "machine": f"m{i // 2}", "rack": "r0"} for i in range(4)],
    "apps": [
        {"id": "a", "rho": 4, "bids": [{"gpus": ["g0"], "rho": 2}, {"gpus": ["g0", "g1"], "rho": 1}]},
        {"id": "b", "rho": 3, "bids": [{"gpus": ["g0", "g1"], "rho": 1.5}, {"gpus": ["g2", "g3"], "rho": 1.6}]},
    ],
    "nonbidders": ["c"],
    "seed": 1,
}


def run(tmp_path: Path, doc: Any, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    p = tmp_path / "in.json"
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    rc = main(["auction", str(p), "--solver", "highs"])
    out, err = capsys.readouterr()
    return rc, out, err


def test_outcome(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(tmp_path, DOC, capsys)
    assert rc == 0
    res = json.loads(out)
    assert set(res) >= {"allocation", "proportional_fair", "kept_fraction", "leftover",
                        "unallocated", "solver", "solve_ms"}
    assert res["proportional_fair"] == {"a": ["g0", "g1"], "b": ["g2", "g3"]}
    assert res["kept_fraction"]["a"] == pytest.approx(1.5 / 1.6)
    assigned = [g for gs in res["allocation"].values() for g in gs]
    assert sorted(assigned) == ["g0", "g1", "g2", "g3"]  # non-bidder c takes any withheld GPU
    assert res["unallocated"] == []
    assert res["solver"] == "highs"


def test_payments_as_the_arbiter_computes_them_grant_the_same_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--no-exact-payments (the arbiter's way, lpbb bracketing) on a 128-GPU x 20-app
    auction: the same GPUs as the exact payments, kept fractions never below them."""
    from themis.arbiter.instances import random_instance

    inst = random_instance(128, 20, seed=2, starving=0.0)  # the CLI takes finite rhos
    doc = {"gpus": [{"id": g.id, "machine": g.machine, "rack": g.rack, "slot": g.slot}
                    for g in inst.offer],
           "apps": [{"id": t.app_id, "rho": t.rho_current,
                     "bids": [{"gpus": list(b.gpus), "rho": b.rho} for b in t.bids]}
                    for t in inst.tables],
           "seed": 3}
    p = tmp_path / "in.json"
    p.write_text(json.dumps(doc))
    outs = []
    for flag in ("--exact-payments", "--no-exact-payments"):
        assert main(["auction", str(p), "--solver", "lpbb", flag]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    exact, fast = outs
    assert fast["allocation"] == exact["allocation"]
    assert all(fast["kept_fraction"][a] >= c - 1e-9 for a, c in exact["kept_fraction"].items())


def bad(**changes: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(DOC))
    for path, value in changes.items():
        target = doc
        keys = path.split("__")
        for k in keys[:-1]:
            target = target[int(k)] if k.isdigit() else target[k]
        last = keys[-1]
        target[int(last) if last.isdigit() else last] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        (bad(apps__0__bids__0__gpus=["nope"]), "app 'a', bid #0: unknown GPU 'nope'"),
        (bad(gpus__1__id="g0"), "duplicate GPU id"),
        (dict(bad(), offer=["g0", "g1"]) | {"apps": [{"id": "a", "rho": 2, "bids": [{"gpus": ["g3"], "rho": 1}]}]},
         "app 'a', bid #0: GPU 'g3' is not in the offer"),
        (bad(apps__0__bids__1__rho=-1), "app 'a', bid #1: rho -1 must be finite and > 0"),
        (bad(apps__1__rho=1e400), "app 'b': rho inf must be finite"),
        (bad(apps__0__id=""), "apps[0].id: must be a non-empty string"),
        (bad(apps__1__id="a"), "app 'a': duplicate app id"),
        (bad(apps__0__bids__0__gpus=[]), "app 'a', bid #0: empty bundle"),
        (bad(nonbidders=["a"]), "app 'a': listed both"),
        ("{not json", "invalid JSON"),
    ],
)
def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: Any, needle: str) -> None:
    rc, out, err = run(tmp_path, doc, capsys)
    assert rc == 2
    assert out == ""
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_console_script_help() -> None:
    proc = subprocess.run([sys.executable, "-m", "themis.cli", "auction", "--help"],
                          capture_output=True, text=True, check=True)
    assert "--solver" in proc.stdout
