"""``themis auction INPUT.json``: run one auction round from a JSON file, print JSON.

Input::

    {"gpus": [{"id": "g0", "machine": "m0", "rack": "r0", "slot": "s0"}, ...],
     "offer": ["g0", ...],                      # optional, default: every GPU
     "apps": [{"id": "a", "rho": 2.0, "bids": [{"gpus": ["g0"], "rho": 1.5}, ...]}, ...],
     "nonbidders": ["b", ...], "seed": 0, "solver": "auto-fast"}

Output: allocation (final grant per app, leftover included), proportional_fair,
kept_fraction (c_i, exact; with --no-exact-payments, as the arbiter computes it: a c_i
giving the same GPUs kept), leftover (per non-bidder), unallocated, solver, solve_ms.

Limits (each an option below): input size, nesting depth, number magnitude (integers are
refused from their digits; NaN and Infinity are refused), GPUs, apps, bids per app, GPUs
per bid, and the wall-clock time of the auction. Ids are non-empty printable strings of at
most 256 characters; unknown fields and duplicate keys are refused. Bad input and any limit
exceeded exit with status 2 and one line naming the field and the problem
(apps[3].bids[17].rho: ...).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import threading
from dataclasses import dataclass
from typing import Any

from themis.mechanism.auction import run_auction
from themis.mechanism.bids import Bid, BidTable
from themis.mechanism.errors import InvalidBid, InvalidOffer
from themis.mechanism.round import distribute_leftover
from themis.mechanism.solvers import DEFAULT_SOLVER, SolverError, make_solver
from themis.mechanism.topology import Gpu, Topology, TopologyError
from themis.safeinput import InputError, Limits, field_path, load_json, short
from themis.stdio import stdout_to_stderr

MAX_ID = 256  # characters of a GPU, machine, rack, slot or app id


@dataclass(frozen=True, slots=True)
class AuctionLimits:
    """Bounds of one auction input (defaults cover the paper's scale with room: a
    4,096-GPU cluster, 1,000 apps, an agent's menu of ~550 bids for 4,096 GPUs)."""

    max_bytes: int = 64 << 20
    max_depth: int = 16
    max_number: float = 1e18
    max_gpus: int = 4096
    max_apps: int = 1000  # bidders; and non-bidders
    max_bids: int = 1024  # per app
    max_bid_gpus: int = 4096  # per bid
    time_limit_s: float = 60.0  # 0: none


def _fail(where: list[str | int], problem: str) -> InputError:
    return InputError(field_path(where), problem)


def _obj(value: Any, where: list[str | int], known: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"must be an object, got {type(value).__name__}")
    for k in value:
        if k not in known:
            raise _fail([*where, k], f"unknown field (known: {', '.join(known)})")
    return value


def _list(value: Any, where: list[str | int], limit: int, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(where, f"must be a list, got {type(value).__name__}")
    if len(value) > limit:
        raise _fail(where, f"{len(value)} {what} exceed the limit of {limit}")
    return value


def _str(value: Any, where: list[str | int]) -> str:
    """A non-empty printable id of at most MAX_ID characters."""
    if not isinstance(value, str) or not value:
        raise _fail(where, f"must be a non-empty string, got {short(value)}")
    if len(value) > MAX_ID:
        raise _fail(where, f"{len(value)} characters exceed the limit of {MAX_ID}")
    if not value.isprintable():
        raise _fail(where, f"{short(value)} has a control or unpaired surrogate character")
    return value


def _rho(value: Any, where: list[str | int]) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(where, f"rho must be a number, got {short(value)}")
    v = float(value)  # finite: the loader refuses NaN, Infinity and |x| > max_number
    if v <= 0:
        raise _fail(where, f"rho {value!r} must be finite and > 0")
    return v


def parse_input(doc: Any, limits: AuctionLimits | None = None
                ) -> tuple[list[Gpu], list[BidTable], list[str], int, str]:
    """The auction of a loaded input; raises InputError naming the field."""
    lim = limits or AuctionLimits()
    top = _obj(doc, [], ("gpus", "offer", "apps", "nonbidders", "seed", "solver"))
    raw_gpus = _list(top.get("gpus"), ["gpus"], lim.max_gpus, "GPUs")
    if not raw_gpus:
        raise _fail(["gpus"], "must be a non-empty list")
    gpus = []
    for k, g in enumerate(raw_gpus):
        g = _obj(g, ["gpus", k], ("id", "machine", "rack", "slot"))
        slot = g.get("slot", "")
        if slot != "":
            _str(slot, ["gpus", k, "slot"])
        try:
            gpus.append(Gpu(_str(g.get("id"), ["gpus", k, "id"]),
                            _str(g.get("machine"), ["gpus", k, "machine"]),
                            _str(g.get("rack"), ["gpus", k, "rack"]), slot))
        except TopologyError as exc:
            raise _fail(["gpus", k], str(exc)) from None
    try:
        topo = Topology(gpus)
    except TopologyError as exc:
        raise _fail(["gpus"], str(exc)) from None
    offer_ids = _list(top.get("offer", [g.id for g in gpus]), ["offer"], lim.max_gpus, "GPUs")
    seen: set[str] = set()
    for k, gid in enumerate(offer_ids):
        _str(gid, ["offer", k])
        if gid not in topo:
            raise _fail(["offer", k], f"unknown GPU {gid!r}")
        if gid in seen:
            raise _fail(["offer", k], f"duplicate GPU {gid!r}")
        seen.add(gid)
    offered = seen
    tables = []
    app_at: dict[str, int] = {}
    for k, a in enumerate(_list(top.get("apps", []), ["apps"], lim.max_apps, "apps")):
        a = _obj(a, ["apps", k], ("id", "rho", "bids"))
        aid = _str(a.get("id"), ["apps", k, "id"])
        if aid in app_at:
            raise _fail(["apps", k, "id"], f"duplicate app id {aid!r} (also apps[{app_at[aid]}])")
        app_at[aid] = k
        r0 = _rho(a.get("rho"), ["apps", k, "rho"])
        bids = []
        raw_bids = _list(a.get("bids", []), ["apps", k, "bids"], lim.max_bids, "bids")
        for j, b in enumerate(raw_bids):
            where: list[str | int] = ["apps", k, "bids", j]
            b = _obj(b, where, ("gpus", "rho"))
            ids = _list(b.get("gpus"), [*where, "gpus"], lim.max_bid_gpus, "GPUs")
            if not ids:
                raise _fail([*where, "gpus"], "empty bundle (the empty bundle is the app's rho)")
            in_bid: set[str] = set()
            for n, g in enumerate(ids):
                _str(g, [*where, "gpus", n])
                if g not in topo:
                    raise _fail([*where, "gpus", n], f"unknown GPU {g!r}")
                if g not in offered:
                    raise _fail([*where, "gpus", n], f"GPU {g!r} is not in the offer")
                if g in in_bid:
                    raise _fail([*where, "gpus", n], f"GPU {g!r} appears twice in the bundle")
                in_bid.add(g)
            bids.append(Bid(tuple(sorted(ids)), _rho(b.get("rho"), [*where, "rho"])))
        tables.append(BidTable(aid, r0, tuple(bids)))
    nonbidders = _list(top.get("nonbidders", []), ["nonbidders"], lim.max_apps, "apps")
    seen_nb: set[str] = set()
    for k, n in enumerate(nonbidders):
        _str(n, ["nonbidders", k])
        if n in app_at:
            raise _fail(["nonbidders", k], f"app {n!r} is listed both as bidder "
                                           f"(apps[{app_at[n]}]) and non-bidder")
        if n in seen_nb:
            raise _fail(["nonbidders", k], f"duplicate app id {n!r}")
        seen_nb.add(n)
    seed = top.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise _fail(["seed"], f"must be an integer, got {short(seed)}")
    solver = top.get("solver", DEFAULT_SOLVER)
    _str(solver, ["solver"])
    return [topo[g] for g in offer_ids], tables, list(nonbidders), seed, solver


def run(doc: Any, solver_override: str | None = None, exact_payments: bool = True,
        limits: AuctionLimits | None = None) -> dict[str, Any]:
    offer, tables, nonbidders, seed, solver_name = parse_input(doc, limits)
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


def _count(lo: int, hi: int) -> Any:
    def parse(text: str) -> int:
        try:
            v = int(text) if len(text) <= 20 else None
        except ValueError:
            v = None
        if v is None or not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be an integer in [{lo}, {hi}], got "
                                             f"{text[:30]!r}")
        return v
    return parse


def _number(lo: float, hi: float, what: str) -> Any:
    """argparse type: a float in [lo, hi] (NaN and junk refused); ``what`` names it in the
    error, which shows the bounds as ``what`` says them."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text[:30]!r}")
        return v
    return parse


_seconds = _number(0, 86_400, "a number of seconds in [0, 86400]")
_magnitude = _number(1, 1e300, "a number in [1, 1e300]")


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
    p.add_argument("--indent", type=_count(0, 16), default=2,
                   help="JSON indentation, 0-16 (0: one line; default 2)")
    p.add_argument(
        "--exact-payments",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compute every hidden payment c_i exactly (default); --no-exact-payments "
        "does what the arbiter does: each solve without a winner stops once the number of "
        "GPUs the winner keeps is settled (the same allocation, faster; kept_fraction is "
        "then a c_i giving that number)",
    )
    d = AuctionLimits()
    g = p.add_argument_group("limits (input beyond one exits with status 2, naming the field)")
    g.add_argument("--max-bytes", type=_count(1, 1 << 34), default=d.max_bytes, metavar="N",
                   help=f"largest input in bytes (default {d.max_bytes}, 64 MiB)")
    g.add_argument("--max-depth", type=_count(6, 1000), default=d.max_depth, metavar="N",
                   help=f"deepest nesting of lists and objects (default {d.max_depth}; the "
                        "format needs 6)")
    g.add_argument("--max-number", type=_magnitude, default=d.max_number, metavar="X",
                   help=f"largest |number| (default {d.max_number:g}; NaN and Infinity are "
                        "always refused)")
    g.add_argument("--max-gpus", type=_count(1, 1 << 20), default=d.max_gpus, metavar="N",
                   help=f"most GPUs in 'gpus' and in 'offer' (default {d.max_gpus})")
    g.add_argument("--max-apps", type=_count(0, 1 << 20), default=d.max_apps, metavar="N",
                   help=f"most bidding apps, and most non-bidders (default {d.max_apps})")
    g.add_argument("--max-bids", type=_count(0, 1 << 20), default=d.max_bids, metavar="N",
                   help=f"most bids per app (default {d.max_bids})")
    g.add_argument("--max-bid-gpus", type=_count(1, 1 << 20), default=d.max_bid_gpus,
                   metavar="N", help=f"most GPUs per bid (default {d.max_bid_gpus})")
    g.add_argument("--time-limit", type=_seconds, default=d.time_limit_s, metavar="SECONDS",
                   help=f"wall-clock limit of the whole command (default "
                        f"{d.time_limit_s:g} s; 0: none): past it the auction stops with "
                        "status 2 (the solve is NP-hard: try --solver open-fast or a larger "
                        "limit)")
    p.set_defaults(func=main)


def _error(message: str) -> int:
    """One line on stderr (newlines escaped, unencodable characters backslashed)."""
    line = message.replace("\r", "\\r").replace("\n", "\\n")
    sys.stderr.write(line.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")
    sys.stderr.flush()
    return 2


class _Watchdog:
    """Ends the process with status 2 and one line once ``seconds`` have passed, unless
    :meth:`finish` ran first (then the caller prints the result; the two never overlap)."""

    def __init__(self, seconds: float) -> None:
        self._gate = threading.Lock()
        self._timer: threading.Timer | None = None
        if seconds > 0:
            self._timer = threading.Timer(seconds, self._expire, args=(seconds,))
            self._timer.daemon = True
            self._timer.start()

    def _expire(self, seconds: float) -> None:
        if self._gate.acquire(blocking=False):
            _error(f"themis auction: time limit of {seconds:g} s exceeded (--time-limit; the "
                   "solve is NP-hard: try --solver open-fast or a larger limit)")
            os._exit(2)

    def finish(self) -> None:
        self._gate.acquire()  # blocks for good if the timer fired (the process is ending)
        if self._timer is not None:
            self._timer.cancel()


def main(args: argparse.Namespace) -> int:
    limits = AuctionLimits(args.max_bytes, args.max_depth, args.max_number, args.max_gpus,
                           args.max_apps, args.max_bids, args.max_bid_gpus, args.time_limit)
    name = "<stdin>" if args.input == "-" else args.input
    watchdog = _Watchdog(limits.time_limit_s)
    try:
        if args.input == "-":
            data = sys.stdin.buffer.read(limits.max_bytes + 1)
        else:
            with open(args.input, "rb") as fh:
                data = fh.read(limits.max_bytes + 1)
    except OSError as exc:
        watchdog.finish()
        return _error(f"themis auction: cannot read {name}: {exc.strerror or exc}")
    try:
        doc = load_json(data, Limits(max_bytes=limits.max_bytes, max_depth=limits.max_depth,
                                     max_nodes=0, max_number=limits.max_number))
        with stdout_to_stderr():  # stdout carries the JSON only (themis.stdio)
            out = run(doc, args.solver, args.exact_payments, limits)
    except InputError as exc:
        watchdog.finish()
        where = "" if exc.where else f"{name}: "  # a field name, or the file for the rest
        return _error(f"themis auction: {where}{exc}")
    except (InvalidBid, InvalidOffer, SolverError) as exc:
        watchdog.finish()
        return _error(f"themis auction: {exc}")
    text = json.dumps(out, indent=args.indent or None, sort_keys=True)
    watchdog.finish()
    print(text)
    return 0
