"""Round-by-round logic (Pseudocode 1 lines 13-23): filtering by f, leftover, grants."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

import pytest

from themis.mechanism.bids import Bid, BidTable
from themis.mechanism.round import RoundError, distribute_leftover, run_round, select_bidders
from themis.mechanism.solvers import make_solver
from themis.mechanism.topology import Gpu


def test_select_keeps_worst_fraction_at_least_one() -> None:
    rhos = {f"a{i}": float(i) for i in range(10)}
    bidders, rest = select_bidders(rhos, 0.8)
    assert bidders == ["a9", "a8"]
    assert len(rest) == 8
    assert select_bidders({"x": 1.0}, 0.8) == (["x"], [])
    assert select_bidders(rhos, 0.0)[0] == [f"a{i}" for i in range(9, -1, -1)]
    assert select_bidders({}, 0.5) == ([], [])


def test_ties_in_rho_and_in_the_auction_favour_no_app() -> None:
    """Eight equally badly off apps, f = 0.8 (two bid) and one GPU that either bidder values
    the same: over seeds, every app gets to bid and to win; with a given seed, the same."""
    from themis.mechanism.auction import run_auction

    rhos = {f"a{i}": 2.0 for i in range(8)}
    gpu = Gpu("g0", "m0", "r0", "s0")
    picked: dict[str, int] = {}
    won: dict[str, int] = {}
    for seed in range(400):
        bidders, _ = select_bidders(rhos, 0.8, random.Random(seed))
        assert len(bidders) == 2
        for a in bidders:
            picked[a] = picked.get(a, 0) + 1
        tables = [BidTable(a, 2.0, (Bid(("g0",), 1.0),)) for a in sorted(bidders)]
        r = run_auction([gpu], tables, make_solver("bnb"), random.Random(seed))
        (winner,) = r.proportional_fair
        won[winner] = won.get(winner, 0) + 1
    assert set(picked) == set(rhos) and min(picked.values()) > 400 * 2 / 8 / 2
    assert set(won) == set(rhos) and min(won.values()) > 400 / 8 / 3
    assert select_bidders(rhos, 0.8, random.Random(7)) == select_bidders(rhos, 0.8,
                                                                         random.Random(7))
    assert select_bidders(rhos, 0.8)[0] == ["a0", "a1"]  # no rng: by app id


def test_priority_orders_ties_only() -> None:
    """The secondary key (starvation-aware filtering) orders apps of equal rho - the
    starving ones at +inf - the larger first, never above an app of larger rho; apps
    without a key come after those with one among equals."""
    inf = math.inf
    rhos = {"a": inf, "b": inf, "c": inf, "d": 5.0, "e": 1.0}
    pri = {"a": 1.0, "b": 7.0, "c": 3.0, "d": 100.0}
    for seed in range(20):
        got, rest = select_bidders(rhos, 0.0, random.Random(seed), pri)
        assert got == ["b", "c", "a", "d", "e"] and rest == []
    assert select_bidders(rhos, 0.5, random.Random(1), pri)[0] == ["b", "c", "a"]
    assert select_bidders({"x": inf, "y": inf}, 0.5, random.Random(0), {"y": 0.5})[0] == ["y"]
    # without priorities (starvation = inf, the paper's reading) the seeded draw is the same
    assert select_bidders(rhos, 0.5, random.Random(3)) == select_bidders(
        rhos, 0.5, random.Random(3), {})
    with pytest.raises(RoundError, match="filter priority"):
        select_bidders(rhos, 0.5, None, {"a": math.nan})


def test_merged_keys_rank_starving_apps_among_all() -> None:
    """starvation = ranked (``merge``): a merged starving app's key stands for its rho, so
    an app stuck at rho 5 on too few GPUs ranks above a starving app whose key (its rho if
    served now) is 3; a starving app without a key stays at +inf, first, and so does a
    starving app left out of ``merge`` (a newcomer), ordered by its key."""
    inf = math.inf
    rhos = {"a": inf, "b": inf, "c": inf, "d": 5.0, "e": 1.0}
    pri = {"a": 1.0, "b": 7.0, "c": 3.0}
    for seed in range(10):
        got, _ = select_bidders(rhos, 0.0, random.Random(seed), pri, merge={"a", "b", "c"})
        assert got == ["b", "d", "c", "a", "e"]  # a (key 1) before e (rho 1): the key breaks it
        # c never held GPUs (a newcomer, not merged): it stays at +inf, first
        got, _ = select_bidders(rhos, 0.0, random.Random(seed), pri, merge={"a", "b"})
        assert got == ["c", "b", "d", "a", "e"]
        assert select_bidders(rhos, 0.0, random.Random(seed), pri)[0] == ["b", "c", "a", "d",
                                                                          "e"]
    got, _ = select_bidders({"x": inf, "y": inf, "z": 2.0}, 0.0, random.Random(0), {"y": 0.5},
                            merge={"x", "y"})
    assert got == ["x", "z", "y"]


@pytest.mark.parametrize("f", [1.0, -0.1, 2])
def test_bad_knob(f: float) -> None:
    with pytest.raises(RoundError, match="fairness knob"):
        select_bidders({"a": 1.0}, f)


def test_leftover_is_seeded_machine_local_and_respects_room() -> None:
    gpus = [Gpu(f"m{m}g{i}", f"m{m}", "r") for m in range(3) for i in range(2)]
    a = distribute_leftover(gpus, ["x", "y", "z"], random.Random(1))
    b = distribute_leftover(gpus, ["x", "y", "z"], random.Random(1))
    assert a == b
    grants, unused = a
    assert unused == ()
    assert all(len({g[:2] for g in gs}) == 1 for gs in grants.values())
    grants, unused = distribute_leftover(gpus, ["x"], random.Random(1), room={"x": 3})
    assert len(grants["x"]) == 3
    assert len(unused) == 3


def test_round_grants_leases_and_treats_missing_bids_as_nonbidders() -> None:
    gpus = [Gpu(f"g{i}", f"m{i // 2}", "r") for i in range(4)]
    rhos = {"slow": 5.0, "late": 4.0, "fine": 0.5}

    def collect(bidders: Sequence[str]) -> Mapping[str, BidTable]:
        assert bidders == ["slow", "late"]
        return {"slow": BidTable("slow", 5.0, (Bid(("g0", "g1"), 2.0),))}

    out = run_round(
        gpus, rhos, collect, fairness_knob=0.5, lease_s=600.0, now=100.0,
        solver=make_solver("highs"), rng=random.Random(0),
    )
    assert out.bidders == ("slow",)
    assert set(out.nonbidders) == {"fine", "late"}
    assert out.allocation["slow"] == ("g0", "g1")
    assert sorted(g for a in ("fine", "late") for g in out.allocation.get(a, ())) == ["g2", "g3"]
    assert all(g.expiry == 700.0 and g.start == 100.0 for g in out.grants)
    granted = [x for g in out.grants for x in g.gpus]
    assert len(granted) == len(set(granted)) == 4


def test_bad_lease() -> None:
    with pytest.raises(RoundError, match="lease"):
        run_round([], {}, lambda b: {}, fairness_knob=0.8, lease_s=0, now=0,
                  solver=make_solver("highs"), rng=random.Random(0))


def _reference_leftover(
    gpus: Sequence[Gpu], nonbidders: Sequence[str], rng: random.Random,
    room: Mapping[str, int] | None,
) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """The leftover rule written naively: seeded order, turns over *all* apps (those
    without room take nothing), machine chunks largest first."""
    order = list(nonbidders)
    rng.shuffle(order)
    left = {a: (room.get(a, 0) if room is not None else len(gpus)) for a in order}
    machines: dict[str, list[Gpu]] = {}
    for g in gpus:
        machines.setdefault(g.machine, []).append(g)
    grants: dict[str, list[str]] = {}
    unused: list[str] = []
    turn = 0
    for _, chunk in sorted(machines.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        ids = [g.id for g in sorted(chunk, key=lambda g: (g.slot, g.id))]
        while ids:
            if not any(left[a] > 0 for a in order):
                unused.extend(ids)
                break
            app = order[turn % len(order)]
            turn += 1
            take = min(left[app], len(ids))
            if take:
                grants.setdefault(app, []).extend(ids[:take])
                left[app] -= take
                ids = ids[take:]
    return {a: tuple(sorted(gs)) for a, gs in grants.items()}, tuple(sorted(unused))


def test_leftover_matches_the_naive_turn_rule() -> None:
    """Apps whose room is used up leave the rotation (one pass over the GPUs instead of a
    scan of every app per turn) without changing who gets what."""
    for seed in range(300):
        r = random.Random(seed)
        gpus = [
            Gpu(f"m{m}g{i}", f"m{m}", f"r{m % 3}", f"s{i // 2}")
            for m in range(r.randint(0, 8))
            for i in range(r.choice([1, 2, 4, 8]))
            if r.random() < 0.7
        ]
        apps = [f"a{i}" for i in range(r.randint(0, 6))]
        room = None if r.random() < 0.3 else {a: r.randint(0, 6) for a in apps}
        got = distribute_leftover(gpus, apps, random.Random(seed), room)
        assert got == _reference_leftover(gpus, apps, random.Random(seed), room), seed


def test_leftover_with_many_saturated_apps() -> None:
    """20,000 non-bidders of which 1 in 100 has room for one GPU: every such app gets
    exactly one GPU, the others none, and nothing is lost."""
    gpus = [Gpu(f"m{m}g{i}", f"m{m}", "r", f"s{i // 2}") for m in range(128) for i in range(8)]
    apps = [f"a{i}" for i in range(20_000)]
    room = {a: (1 if i % 100 == 0 else 0) for i, a in enumerate(apps)}
    grants, unused = distribute_leftover(gpus, apps, random.Random(0), room)
    assert set(grants) == {a for a in apps if room[a]}
    assert all(len(gs) == 1 for gs in grants.values())
    assert len(unused) == len(gpus) - 200
    assert sorted([*unused, *(g for gs in grants.values() for g in gs)]) == sorted(
        g.id for g in gpus
    )


def test_leftover_renews_expired_leases_to_their_holders_first() -> None:
    gpus = [Gpu(f"m{m}g{i}", f"m{m}", "r", f"s{i // 2}") for m in range(2) for i in range(4)]
    previous = {"m0g1": "x", "m1g2": "x", "m1g3": "y", "m0g0": "bidder", "m0g3": "gone"}
    room = {"x": 2, "y": 4, "z": 4}
    runs = [
        distribute_leftover(gpus, ["x", "y", "z"], random.Random(s), room, previous)
        for s in (5, 5, 6)
    ]
    assert runs[0] == runs[1]  # seeded: deterministic
    for grants, unused in runs:
        assert grants["x"] == ("m0g1", "m1g2")  # its own GPUs back, room used up
        assert "m1g3" in grants["y"]
        # GPUs of a bidder or of a departed app are dealt at random like any other.
        assert unused == ()
        assert sorted(g for gs in grants.values() for g in gs) == sorted(g.id for g in gpus)
        assert all(len(grants.get(a, ())) <= room[a] for a in room)
    # Room caps renewal too: x may keep only one of its two GPUs.
    grants, _ = distribute_leftover(gpus, ["x"], random.Random(0), {"x": 1}, previous)
    assert grants["x"] == ("m0g1",)
    # Without ``previous`` the rule is the plain random one.
    assert distribute_leftover(gpus, ["x", "y", "z"], random.Random(5), room) == (
        _reference_leftover(gpus, ["x", "y", "z"], random.Random(5), room)
    )


def test_round_renews_leftover_but_bidders_bid_first() -> None:
    gpus = [Gpu(f"g{i}", f"m{i // 2}", "r") for i in range(4)]
    rhos = {"worst": 9.0, "ok": 0.5}
    previous = {"g0": "ok", "g1": "ok", "g2": "ok", "g3": "ok"}

    def collect(bidders: Sequence[str]) -> Mapping[str, BidTable]:
        return {"worst": BidTable("worst", 9.0, (Bid(("g2", "g3"), 3.0),))}

    out = run_round(
        gpus, rhos, collect, fairness_knob=0.5, lease_s=600.0, now=0.0,
        solver=make_solver("bnb"), rng=random.Random(0), room={"worst": 2, "ok": 4},
        previous=previous,
    )
    assert out.allocation["worst"] == ("g2", "g3")  # the auction runs on the whole offer
    assert out.leftover == {"ok": ("g0", "g1")}  # renewal of what the auction left


@pytest.mark.parametrize("n_apps", [1, 2, 100])
def test_no_gpu_idles_when_f_leaves_no_nonbidders(n_apps: int) -> None:
    """f = 0 makes every app a bidder: GPUs the auction withholds as hidden payments (or
    that no bid names) have no non-bidder to go to, and must still be granted to apps
    that can use them (work conservation, section 3.3.2) - never left idle."""
    gpus = [Gpu(f"g{i}", f"m{i // 4}", f"r{i // 16}") for i in range(64)]
    rhos = {f"a{k}": 1.0 + k for k in range(n_apps)}
    room = {a: 64 for a in rhos}

    def collect(bidders: Sequence[str]) -> Mapping[str, BidTable]:
        # every app bids for the same two GPUs: the winner pays, the rest is withheld
        return {a: BidTable(a, rhos[a], (Bid(("g0", "g1"), rhos[a] / 2),)) for a in bidders}

    out = run_round(gpus, rhos, collect, fairness_knob=0.0, lease_s=60.0, now=0.0,
                    solver=make_solver("highs"), rng=random.Random(1), room=room)
    assert out.nonbidders == ()
    assert out.unallocated == ()
    granted = sorted(x for g in out.grants for x in g.gpus)
    assert granted == sorted(g.id for g in gpus)  # all 64, each once


def test_withheld_gpus_respect_room() -> None:
    gpus = [Gpu(f"g{i}", "m0", "r") for i in range(4)]
    rhos = {"a": 3.0}

    def collect(bidders: Sequence[str]) -> Mapping[str, BidTable]:
        return {"a": BidTable("a", 3.0, (Bid(("g0",), 1.5),))}

    out = run_round(gpus, rhos, collect, fairness_knob=0.0, lease_s=60.0, now=0.0,
                    solver=make_solver("highs"), rng=random.Random(0), room={"a": 2})
    assert len(out.allocation["a"]) == 2
    assert len(out.unallocated) == 2
