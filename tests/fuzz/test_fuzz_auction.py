"""Fuzzing ``themis auction``: every input exits 0 with a feasible allocation, or 2 with
one line; never a traceback, never past the deadline."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from tests.fuzz._fuzz import JSON_SNIPPETS, byte_mutations, fuzz_settings, mutated
from themis.cli import main


@st.composite
def auction_docs(draw: st.DrawFn) -> dict[str, Any]:
    """A mostly valid auction: a few machines, apps bidding on subsets (some GPUs
    unknown or not offered), non-bidders, a seed."""
    n = draw(st.integers(1, 10))
    gpus = [{"id": f"g{i}", "machine": f"m{i // 4}", "rack": f"r{i // 8}",
             "slot": f"s{(i % 4) // 2}"} for i in range(n)]
    ids = [g["id"] for g in gpus]
    doc: dict[str, Any] = {"gpus": gpus}
    if draw(st.booleans()):
        doc["offer"] = draw(st.lists(st.sampled_from(ids), unique=True))
    rho = st.floats(0.05, 20.0)
    apps = []
    for a in range(draw(st.integers(0, 5))):
        bids = [{"gpus": draw(st.lists(st.sampled_from([*ids, "zz"]), min_size=1, max_size=4,
                                       unique=True)), "rho": draw(rho)}
                for _ in range(draw(st.integers(0, 5)))]
        apps.append({"id": f"a{a}", "rho": draw(rho), "bids": bids})
    doc["apps"] = apps
    doc["nonbidders"] = [f"n{k}" for k in range(draw(st.integers(0, 3)))]
    doc["seed"] = draw(st.integers(0, 2**32))
    return doc


def run_cli(data: bytes, *flags: str) -> tuple[int, str, str]:
    fd, path = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["auction", path, "--solver", "bnb", "--time-limit", "0", "--indent",
                       "0", *flags])
        return rc, out.getvalue(), err.getvalue()
    finally:
        os.unlink(path)


def check_outcome(doc: dict[str, Any], out: dict[str, Any]) -> None:
    """The accepted auction's result is feasible (paper section 3.3.1): GPUs of the offer
    only, each to at most one app, bidders within their proportional-fair bundle (one of
    their bids, pairwise disjoint) with about c_i of it, leftover to non-bidders only."""
    offer = doc.get("offer", [g["id"] for g in doc["gpus"]])
    bids = {a["id"]: [sorted(b["gpus"]) for b in a.get("bids", [])]
            for a in doc.get("apps", [])}
    nonbidders = set(doc.get("nonbidders", []))
    granted = [g for gs in out["allocation"].values() for g in gs]
    assert len(granted) == len(set(granted)), "a GPU granted twice"
    assert sorted([*granted, *out["unallocated"]]) == sorted(offer)
    pf_gpus = [g for gs in out["proportional_fair"].values() for g in gs]
    assert len(pf_gpus) == len(set(pf_gpus)) and set(pf_gpus) <= set(offer)
    for app, bundle in out["proportional_fair"].items():
        assert sorted(bundle) in bids[app]
    for app, gs in out["allocation"].items():
        if app in bids:
            pf = out["proportional_fair"].get(app, [])
            c = out["kept_fraction"][app]
            assert set(gs) <= set(pf) and 0.0 <= c <= 1.0
            assert math.floor(c * len(pf) - 1e-9) <= len(gs) <= math.ceil(c * len(pf) + 1e-9)
        else:
            assert app in nonbidders and gs == sorted(out["leftover"][app])
    assert set(out["leftover"]) <= nonbidders


def check_run(data: bytes) -> None:
    rc, out, err = run_cli(data)
    event(f"exit {rc}")
    assert "Traceback" not in err
    if rc == 0:
        check_outcome(json.loads(data), json.loads(out))
    else:
        assert rc == 2, err
        assert out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("themis auction: "), err


@fuzz_settings(150)
@given(st.data())
def test_structured_auction_inputs(data: st.DataObject) -> None:
    doc = data.draw(auction_docs())
    doc = data.draw(mutated(doc))
    check_run(json.dumps(doc).encode())


@fuzz_settings(150)
@given(st.data())
def test_byte_mutated_auction_inputs(data: st.DataObject) -> None:
    raw = json.dumps(data.draw(auction_docs())).encode()
    check_run(data.draw(byte_mutations(raw, JSON_SNIPPETS)))


@fuzz_settings(50)
@given(st.binary(max_size=200))
def test_random_bytes(raw: bytes) -> None:
    check_run(raw)
