"""The compiled menu core (themis/mechanism/_menu.c) against its pure-Python reference: the
same bundles in the same order, made of the same Gpu objects, and the same bid tables,
on random offers (many racks, machines of different sizes and slot layouts, GPUs listed
in any order), held GPUs, previous leases, tie hashes (colliding ones included),
alternatives and caps."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from themis.mechanism import bids
from themis.mechanism.bids import (
    Bid,
    OfferIndex,
    _tie_of,
    _ties,
    candidate_bundles,
    candidate_bundles_py,
    make_bid_table,
    make_bid_table_py,
)
from themis.mechanism.fairness import FairnessContext
from themis.mechanism.instances import heterogeneous_cluster, random_app
from themis.mechanism.topology import Gpu

try:
    from themis.mechanism import _menu as compiled
except ImportError:  # pragma: no cover - depends on the build
    compiled = None  # type: ignore[assignment]

# Like the other compiled parts (tests/unit/test_cuts.py), a missing build fails: the
# project's scripts always build it, and a silent skip would hide a broken build.
needs_menu = pytest.mark.usefixtures("_menu_built")


@pytest.fixture
def _menu_built() -> None:
    assert compiled is not None, (
        "themis.mechanism._menu was not built (python3 setup.py build_ext --inplace)")


LAYOUTS = ("default", "pairs", "quads", "uneven", "one-slot")


@dataclass
class Scenario:
    offer: list[Gpu]
    held: list[Gpu]
    previous: list[str]
    salt: str
    ties: dict[str, int] | None  # tie hashes to plant for ``salt`` (collisions), or None
    alternatives: int
    max_new: int
    app_seed: int
    now: float


def _topology(rng: random.Random, n_racks: int, max_machines: int, max_size: int,
              messy: bool, wide: bool) -> list[Gpu]:
    """GPUs of racks of machines of various sizes and slot layouts; names are random so
    that name order, offer order and fill order differ. ``messy``: some machines share a
    name across racks and some GPUs sit in another rack than their machine's. ``wide``:
    some ids and slot names have characters beyond ASCII (1, 2 and 4 bytes per character)."""
    # pairs whose code point order and little-endian byte order disagree
    marks = ("", "a", "\u00e9", "\u01ff", "\u0200", "\U0001d11e", "\U0001f600") if wide else ("",)
    gpus: list[Gpu] = []
    names = rng.sample(range(1000), n_racks * max_machines + n_racks)
    for _ in range(n_racks):
        rack = f"r{names.pop()}"
        for _ in range(rng.randint(0, max_machines)):
            machine = f"m{names.pop()}" if not (messy and rng.random() < 0.2) else "m-shared"
            size = rng.randint(1, max_size)
            layout = rng.choice(LAYOUTS)
            slot_names = rng.sample(range(100), size)
            for i, n in enumerate(rng.sample(range(100), size)):
                if layout == "default":
                    slot = ""  # the GPU's own id
                elif layout == "pairs":
                    slot = f"s{slot_names[i // 2]}{marks[slot_names[i // 2] % len(marks)]}"
                elif layout == "quads":
                    slot = f"s{slot_names[i // 4]}"
                elif layout == "uneven":
                    slot = f"s{slot_names[rng.randint(0, min(2, size - 1))]}"
                else:
                    slot = "s"
                own_rack = rack if not (messy and rng.random() < 0.1) else f"r{rng.randint(0, 3)}"
                gid = f"{machine}/g{rng.choice(marks)}{n:02d}"
                gpus.append(Gpu(gid, machine, own_rack, slot))
    # a shared machine name may repeat an id: keep the first of each id
    unique = {g.id: g for g in reversed(gpus)}
    return [g for g in gpus if unique[g.id] is g]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    n_racks = draw(st.integers(1, 9))
    max_machines = draw(st.integers(1, 6))
    max_size = draw(st.sampled_from([1, 2, 4, 8, 10, 16]))
    cluster = _topology(rng, n_racks, max_machines, max_size, draw(st.booleans()),
                        draw(st.booleans()))
    share = draw(st.floats(0.05, 1.0))  # of the cluster offered
    offer = [g for g in cluster if rng.random() < share]
    if draw(st.booleans()):
        rng.shuffle(offer)  # machines interleaved in the offer
    offered = {g.id for g in offer}
    rest = [g for g in cluster if g.id not in offered]
    held = rng.sample(rest, min(len(rest), draw(st.integers(0, 5))))
    if draw(st.booleans()):
        held.append(Gpu("far/g0", "far-machine", "far-rack", "s"))  # not in the offer's racks
    previous = rng.sample(sorted(offered), min(len(offered), draw(st.integers(0, 8))))
    if draw(st.booleans()):
        previous.append("no-such-gpu")
    salt = f"menu-test-{seed}"
    ties = None
    if draw(st.booleans()):  # colliding tie hashes for (some of) the machines and racks
        names = {g.machine for g in cluster} | {g.rack for g in cluster}
        ties = {n: rng.randint(0, 1) for n in sorted(names) if rng.random() < 0.8}
    return Scenario(
        offer=offer,
        held=held,
        previous=previous,
        salt=salt,
        ties=ties,
        alternatives=draw(st.integers(-1, 4)),
        max_new=len(offer) + 2 if draw(st.booleans()) else draw(st.integers(0, len(offer))),
        app_seed=draw(st.integers(0, 2**16)),
        now=draw(st.sampled_from([1000.0, 5e4, 2e5])),
    )


def _plant_ties(s: Scenario) -> None:
    """Plants the scenario's tie hashes; also empties the reference's memo of machine fill
    orders, which may hold equal Gpu records of an earlier offer (the reference would
    return those objects, equal but not the same; the compiled menu returns the offer's)."""
    bids._ORDER_CACHE.clear()
    bids._TIES.pop(s.salt, None)
    if s.ties is not None:
        bids._TIES[s.salt] = dict(s.ties)


def _bundle_ids(menu: list[list[Gpu]]) -> list[list[int]]:
    return [[id(g) for g in b] for b in menu]


@needs_menu
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=scenarios())
def test_compiled_menu_is_the_reference_menu(s: Scenario) -> None:
    index = OfferIndex(s.offer)
    assert index.native is not None
    _plant_ties(s)
    args = (s.held, s.max_new, s.alternatives, s.salt, tuple(s.previous))
    want = candidate_bundles_py(index, *args)
    got = candidate_bundles(index, *args)
    assert _bundle_ids(got) == _bundle_ids(want)  # the same Gpu objects, in the same order
    # the same from a plain offer, and from a one-shot iterator of previous ids
    plain = candidate_bundles(s.offer, s.held, s.max_new, s.alternatives, s.salt,
                              iter(s.previous))
    assert plain == want


@needs_menu
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=scenarios())
def test_compiled_bid_table_is_the_reference_table(s: Scenario) -> None:
    index = OfferIndex(s.offer)
    app = random_app(random.Random(s.app_seed), s.salt, s.now)
    ctx = FairnessContext(now=s.now, cluster_gpus=max(1, len(s.offer)), n_avg=2.0)
    _plant_ties(s)
    want = make_bid_table_py(app, s.held, index, ctx, alternatives=s.alternatives,
                             previous=s.previous)
    got = make_bid_table(app, s.held, index, ctx, alternatives=s.alternatives,
                         previous=s.previous)
    assert got == want
    assert [b.rho.hex() for b in got.bids] == [b.rho.hex() for b in want.bids]


@needs_menu
def test_compiled_tables_of_a_large_offer() -> None:
    """A whole 1024-GPU cluster offered, apps of every kind, held GPUs on other machines."""
    offer = heterogeneous_cluster(1024)
    index = OfferIndex(offer)
    rng = random.Random(3)
    ctx = FairnessContext(now=1e4, cluster_gpus=2048, n_avg=3.0)
    for a in range(40):
        app = random_app(rng, f"big{a}", ctx.now)
        held = [Gpu(f"h{a}-{i}", f"hm{a % 3}", "hr", f"s{i // 2}") for i in range(a % 4)]
        previous = [g.id for g in rng.sample(offer, a % 9)]
        assert make_bid_table(app, held, index, ctx, previous=previous) == make_bid_table_py(
            app, held, index, ctx, previous=previous)


@needs_menu
def test_shared_ids_fall_back_to_the_reference() -> None:
    offer = [Gpu("a", "m0", "r0"), Gpu("a", "m1", "r0"), Gpu("b", "m1", "r0")]
    index = OfferIndex(offer)
    assert index.native is None
    assert candidate_bundles(index, [], 3) == candidate_bundles_py(index, [], 3)


def test_reference_is_used_without_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bids, "_menu", None)
    offer = heterogeneous_cluster(32)
    index = OfferIndex(offer)
    assert index.native is None
    app = random_app(random.Random(1), "plain", 1e4)
    ctx = FairnessContext(now=1e4, cluster_gpus=32, n_avg=1.0)
    assert make_bid_table(app, [], index, ctx) == make_bid_table_py(app, [], index, ctx)
    assert candidate_bundles(index, [], 4) == candidate_bundles_py(index, [], 4)


@dataclass
class _NotAGpu:
    id: object
    machine: object = "m"
    rack: object = "r"
    slot: object = "s"


@needs_menu
def test_bad_input_raises() -> None:
    menu: Any = compiled  # called with wrong types on purpose
    with pytest.raises(AttributeError):
        menu.offer([object()])
    with pytest.raises(TypeError, match="must be a str"):
        menu.offer([_NotAGpu(3)])
    with pytest.raises(TypeError):
        menu.offer(5)
    native = menu.offer(heterogeneous_cluster(16))
    assert native is not None and native.size == 16
    ties = _ties("bad")
    good: tuple[Any, ...] = (native, [], (), 4, 3, ties, "bad", _tie_of)
    assert menu.menu(*good)
    with pytest.raises(TypeError):
        menu.menu("not an offer", *good[1:])
    with pytest.raises(AttributeError):
        menu.menu(native, [object()], *good[2:])
    with pytest.raises(TypeError, match="must be str"):
        menu.menu(native, [], ["gpu", 7], *good[3:])
    with pytest.raises(ValueError, match="per_k"):
        menu.menu(native, [], (), 4, 0, ties, "bad", _tie_of)
    with pytest.raises(TypeError):
        menu.menu(native, [], (), 4, 3, [], "bad", _tie_of)
    with pytest.raises(TypeError, match="callable"):
        menu.menu(native, [], (), 4, 3, ties, "bad", None)
    not_ints = {g.machine: "x" for g in heterogeneous_cluster(16)}
    with pytest.raises(TypeError):
        menu.menu(native, [], (), 4, 3, not_ints, "bad", _tie_of)
    parts = (1.0, ((1, 1.0),), ())
    rest = ((1.0, 1.0, 1.1, 1.3), 0.0, 1.0, 10.0, Bid)
    assert menu.bids(*good, parts, *rest)
    with pytest.raises(TypeError, match="remaining"):
        menu.bids(*good, (1.0, ()), *rest)
    with pytest.raises(TypeError):
        menu.bids(*good, (1.0, ((1, "x"),), ()), *rest)
    with pytest.raises(ValueError, match="slowdowns"):
        menu.bids(*good, parts, (1.0, 1.0), *rest[1:])
    with pytest.raises(TypeError, match="callable"):
        menu.bids(*good, parts, *rest[:-1], None)
