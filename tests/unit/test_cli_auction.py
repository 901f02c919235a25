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
    from themis.mechanism.instances import random_instance

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
        (bad(apps__0__bids__0__gpus=["nope"]), "apps[0].bids[0].gpus[0]: unknown GPU 'nope'"),
        (bad(gpus__1__id="g0"), "duplicate GPU id"),
        (dict(bad(), offer=["g0", "g1"]) | {"apps": [{"id": "a", "rho": 2, "bids": [{"gpus": ["g3"], "rho": 1}]}]},
         "apps[0].bids[0].gpus[0]: GPU 'g3' is not in the offer"),
        (bad(apps__0__bids__1__rho=-1), "apps[0].bids[1].rho: rho -1 must be finite and > 0"),
        (bad(apps__1__rho=1e400), "apps[1].rho: Infinity is not a JSON number"),
        (bad(apps__0__id=""), "apps[0].id: must be a non-empty string"),
        (bad(apps__1__id="a"), "apps[1].id: duplicate app id 'a' (also apps[0])"),
        (bad(apps__0__bids__0__gpus=[]), "apps[0].bids[0].gpus: empty bundle"),
        (bad(nonbidders=["a"]), "nonbidders[0]: app 'a' is listed both"),
        ("{not json", "not valid JSON"),
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


# ------------------------------------------------------------------ bounded input (limits)
def run_raw(tmp_path: Path, data: bytes, capsys: pytest.CaptureFixture[str],
            *flags: str) -> tuple[int, str, str]:
    p = tmp_path / "in.json"
    p.write_bytes(data)
    rc = main(["auction", str(p), "--solver", "highs", *flags])
    out, err = capsys.readouterr()
    return rc, out, err


def dumps(doc: Any) -> bytes:
    return json.dumps(doc).encode()


@pytest.mark.parametrize(("data", "flags", "needle"), [
    (dumps(DOC).replace(b'"rho": 4', b'"rho": 4' + b"0" * 400), (),
     "apps[0].rho: integer 400000000000...(401 characters) is out of range"),
    (dumps(DOC).replace(b'"rho": 4', b'"rho": 4' + b"0" * 5000), (), "apps[0].rho: integer"),
    (dumps(DOC).replace(b'"rho": 4', b'"rho": NaN'), (), "apps[0].rho: NaN is not a JSON"),
    (dumps(DOC).replace(b'"rho": 4', b'"rho": 4e18'), (), "apps[0].rho: number 4e18 is out"),
    (dumps(DOC).replace(b'"seed": 1', b'"seed": ' + b"[" * 1000 + b"]" * 1000), (),
     "nesting deeper than the limit of 16"),
    (b'{"gpus": "\xff"}', (), "not UTF-8 text (byte 0xff at offset 10)"),
    (dumps(DOC).replace(b'"seed": 1', b'"seed": 1, "seed": 2'), (), "duplicate key 'seed'"),
    (dumps(bad(apps__0__bidz=[])), (), "apps[0].bidz: unknown field"),
    (dumps(DOC), ("--max-apps", "1"), "apps: 2 apps exceed the limit of 1"),
    (dumps(DOC), ("--max-bids", "1"), "apps[0].bids: 2 bids exceed the limit of 1"),
    (dumps(DOC), ("--max-bid-gpus", "1"), "apps[0].bids[1].gpus: 2 GPUs exceed the limit of 1"),
    (dumps(DOC), ("--max-gpus", "3"), "gpus: 4 GPUs exceed the limit of 3"),
    (dumps(DOC), ("--max-bytes", "100"), "bytes exceed the size limit of 100"),
    (dumps(DOC), ("--max-number", "3"), "apps[0].rho: integer 4 is out of range (|x| <= 3)"),
    (dumps(bad(gpus__0__id="g" * 300)), (), "gpus[0].id: 300 characters exceed the limit"),
    (dumps(bad(gpus__0__slot=["s"])), (), "gpus[0].slot: must be a non-empty string"),
    (dumps(bad(apps__0__bids__0__gpus=["g0", "g0"])), (),
     "apps[0].bids[0].gpus[1]: GPU 'g0' appears twice"),
    (dumps(bad(apps__0__id="a\n\udc80")), (),
     "apps[0].id: 'a\\n\\udc80' has a control or unpaired surrogate character"),
    (dumps(DOC | {"solver": "magic"}), (), "magic"),
])
def test_limits_and_hostile_input_exit_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes,
        flags: tuple[str, ...], needle: str) -> None:
    p = tmp_path / "in.json"
    p.write_bytes(data)
    argv = ["auction", str(p), *flags]
    if "solver" not in data.decode("utf-8", "replace"):
        argv += ["--solver", "highs"]
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert needle in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_limit_options_are_usage_errors(tmp_path: Path) -> None:
    for flag, value in (("--max-apps", "-1"), ("--time-limit", "nan"), ("--indent", "99"),
                        ("--max-number", "inf"), ("--max-depth", "3")):
        proc = subprocess.run([sys.executable, "-m", "themis.cli", "auction", "x.json", flag,
                               value], capture_output=True, text=True)
        assert proc.returncode == 2 and flag in proc.stderr and "Traceback" not in proc.stderr


def test_time_limit_ends_a_long_auction_with_one_line(tmp_path: Path) -> None:
    import time

    from themis.mechanism.instances import random_instance

    inst = random_instance(512, 200, seed=1, starving=0.0)
    doc = {"gpus": [{"id": g.id, "machine": g.machine, "rack": g.rack, "slot": g.slot}
                    for g in inst.offer],
           "apps": [{"id": t.app_id, "rho": t.rho_current,
                     "bids": [{"gpus": list(b.gpus), "rho": b.rho} for b in t.bids]}
                    for t in inst.tables]}
    p = tmp_path / "big.json"
    p.write_text(json.dumps(doc))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "themis.cli", "auction", str(p), "--solver",
                           "highs", "--time-limit", "0.05"], capture_output=True, text=True,
                          timeout=60)
    assert time.monotonic() - t0 < 20
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "themis auction: time limit of 0.05 s exceeded (--time-limit; the solve is NP-hard: "
        "try --solver open-fast or a larger limit)"]


def test_help_shows_every_limit_with_its_default() -> None:
    proc = subprocess.run([sys.executable, "-m", "themis.cli", "auction", "--help"],
                          capture_output=True, text=True, check=True)
    text = " ".join(proc.stdout.split())
    for words in ("--max-bytes N largest input in bytes (default 67108864",
                  "--max-depth N deepest nesting of lists and objects (default 16",
                  "--max-number X largest |number| (default 1e+18",
                  "--max-gpus N most GPUs in 'gpus' and in 'offer' (default 4096)",
                  "--max-apps N most bidding apps, and most non-bidders (default 1000)",
                  "--max-bids N most bids per app (default 1024)",
                  "--max-bid-gpus N most GPUs per bid (default 4096)",
                  "--time-limit SECONDS wall-clock limit of the whole command (default 60 s"):
        assert words in text
