"""``themis auction INPUT.json``: run one auction round from a JSON file, print JSON.

Input::

    {"gpus": [{"id": "g0", "machine": "m0", "rack": "r0", "slot": "s0"}, ...],
     "offer": ["g0", ...],                      # optional, default: every GPU
     "apps": [{"id": "a", "rho": 2.0, "bids": [{"gpus": ["g0"], "rho": 1.5}, ...]}, ...],
     "nonbidders": ["b", ...], "seed": 0, "solver": "auto"}

Output: allocation (final grant per app, leftover included), proportional_fair,
kept_fraction (c_i, exact; with --no-exact-payments, as the arbiter computes it: a c_i
giving the same GPUs kept), leftover (per non-bidder), unallocated, solver, solve_ms.
Bad input exits with status 2 and one line naming the app, the bid and the problem.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from typing import Any

from themis.agent.bids import Bid, BidTable
from themis.arbiter.auction import run_auction
from themis.arbiter.errors import InvalidBid, InvalidOffer
from themis.arbiter.round import distribute_leftover
from themis.arbiter.solvers import SolverError, make_solver
from themis.cluster.topology import Gpu, Topology, TopologyError
from themis.stdio import stdout_to_stderr


class InputError(ValueError):
    """The auction input file is malformed."""


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InputError(f"{what}: must be a non-empty string, got {value!r}")
    return value


def _rho(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{what}: rho must be a number, got {value!r}")
    v = float(value)
    if math.isnan(v) or math.isinf(v) or v <= 0:
        raise InputError(f"{what}: rho {value!r} must be finite and > 0")
    return v


def parse_input(doc: Any) -> tuple[list[Gpu], list[BidTable], list[str], int, str]:
    if not isinstance(doc, dict):
        raise InputError("input: top level must be a JSON object")
    raw_gpus = doc.get("gpus")
    if not isinstance(raw_gpus, list) or not raw_gpus:
        raise InputError("input: 'gpus' must be a non-empty list")
    gpus = []
    for k, g in enumerate(raw_gpus):
        if not isinstance(g, dict):
            raise InputError(f"gpus[{k}]: must be an object")
        gid = _str(g.get("id"), f"gpus[{k}].id")
        try:
            gpus.append(
                Gpu(
                    gid,
                    _str(g.get("machine"), f"GPU {gid!r}: machine"),
                    _str(g.get("rack"), f"GPU {gid!r}: rack"),
                    str(g.get("slot", "")),
                )
            )
        except TopologyError as exc:
            raise InputError(str(exc)) from exc
    try:
        topo = Topology(gpus)
    except TopologyError as exc:
        raise InputError(str(exc)) from exc
    offer_ids = doc.get("offer", [g.id for g in gpus])
    if not isinstance(offer_ids, list):
        raise InputError("input: 'offer' must be a list of GPU ids")
    seen: set[str] = set()
    for gid in offer_ids:
        _str(gid, "offer entry")
        if gid not in topo:
            raise InputError(f"offer: unknown GPU {gid!r}")
        if gid in seen:
            raise InputError(f"offer: duplicate GPU {gid!r}")
        seen.add(gid)
    offer = [topo[g] for g in offer_ids]
    raw_apps = doc.get("apps", [])
    if not isinstance(raw_apps, list):
        raise InputError("input: 'apps' must be a list")
    tables = []
    app_ids: set[str] = set()
    for k, a in enumerate(raw_apps):
        if not isinstance(a, dict):
            raise InputError(f"apps[{k}]: must be an object")
        aid = _str(a.get("id"), f"apps[{k}].id")
        if aid in app_ids:
            raise InputError(f"app {aid!r}: duplicate app id")
        app_ids.add(aid)
        r0 = _rho(a.get("rho"), f"app {aid!r}")
        raw_bids = a.get("bids", [])
        if not isinstance(raw_bids, list):
            raise InputError(f"app {aid!r}: 'bids' must be a list")
        bids = []
        for j, b in enumerate(raw_bids):
            where = f"app {aid!r}, bid #{j}"
            if not isinstance(b, dict) or not isinstance(b.get("gpus"), list):
                raise InputError(f"{where}: must be an object with a 'gpus' list")
            ids = [_str(g, f"{where}: GPU id") for g in b["gpus"]]
            for g in ids:
                if g not in topo:
                    raise InputError(f"{where}: unknown GPU {g!r}")
            bids.append(Bid(tuple(ids), _rho(b.get("rho"), where)))
        tables.append(BidTable(aid, r0, tuple(bids)))
    nonbidders = doc.get("nonbidders", [])
    if not isinstance(nonbidders, list):
        raise InputError("input: 'nonbidders' must be a list of app ids")
    for n in nonbidders:
        _str(n, "nonbidders entry")
        if n in app_ids:
            raise InputError(f"app {n!r}: listed both as bidder and non-bidder")
    if len(set(nonbidders)) != len(nonbidders):
        raise InputError("nonbidders: duplicate app id")
    seed = doc.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"input: 'seed' must be an integer, got {seed!r}")
    solver = doc.get("solver", "auto")
    _str(solver, "input: 'solver'")
    return offer, tables, list(nonbidders), seed, solver


def run(doc: Any, solver_override: str | None = None,
        exact_payments: bool = True) -> dict[str, Any]:
    offer, tables, nonbidders, seed, solver_name = parse_input(doc)
    solver = make_solver(solver_override or solver_name)
    rng = random.Random(seed)
    result = run_auction(offer, tables, solver, rng, exact_payments=exact_payments)
    left_ids = set(result.leftover)
    leftover, unallocated = distribute_leftover(
        [g for g in offer if g.id in left_ids], nonbidders, rng
    )
    allocation = {a: list(g) for a, g in result.allocation.items()}
    for a, gs in leftover.items():
        allocation[a] = sorted([*allocation.get(a, []), *gs])
    return {
        "allocation": allocation,
        "proportional_fair": {a: list(g) for a, g in result.proportional_fair.items()},
        "kept_fraction": result.kept_fraction,
        "leftover": {a: list(g) for a, g in leftover.items()},
        "unallocated": list(unallocated),
        "solver": result.solver,
        "solve_ms": round(result.solve_ms, 3),
    }


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "auction",
        help="run one partial-allocation auction from a JSON file",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", help="auction input JSON file ('-' for standard input)")
    p.add_argument(
        "--solver",
        default=None,
        help="solver: auto (Gurobi if licensed, else HiGHS), auto-fast (fast exact chain, "
        "Gurobi when licensed), open-fast (open-source chain), highs, gurobi, lpbb, bnb, "
        "cpsat, bruteforce (docs/mechanism.md); overrides the input's 'solver' field",
    )
    p.add_argument("--indent", type=int, default=2, help="JSON indentation (0: one line)")
    p.add_argument(
        "--exact-payments",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compute every hidden payment c_i exactly (default); --no-exact-payments "
        "does what the arbiter does: each solve without a winner stops once the number of "
        "GPUs the winner keeps is settled (the same allocation, faster; kept_fraction is "
        "then a c_i giving that number)",
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        if args.input == "-":
            doc = json.load(sys.stdin)
        else:
            with open(args.input, encoding="utf-8") as fh:
                doc = json.load(fh)
    except OSError as exc:
        print(f"themis auction: cannot read {args.input}: {exc.strerror}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as exc:
        print(f"themis auction: {args.input}: invalid JSON: {exc}", file=sys.stderr)
        return 2
    try:
        with stdout_to_stderr():  # stdout carries the JSON only (themis.stdio)
            out = run(doc, args.solver, args.exact_payments)
    except (InputError, InvalidBid, InvalidOffer, SolverError) as exc:
        print(f"themis auction: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=args.indent or None, sort_keys=True))
    return 0
