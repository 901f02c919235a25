"""Agent bid tables: menu shape, rho of held + bundle, useful counts, placement."""

from __future__ import annotations

from themis.mechanism.bids import (
    candidate_bundles,
    make_bid_table,
    make_bid_table_py,
    useful_counts,
)
from themis.mechanism.fairness import FairnessContext, rho
from themis.mechanism.instances import heterogeneous_cluster
from themis.mechanism.model import AppKind, AppModel, Job
from themis.mechanism.placement import NETWORK_INTENSIVE
from themis.mechanism.topology import Gpu, Locality, locality_of

CTX = FairnessContext(now=1000.0, cluster_gpus=64, n_avg=4.0)


def test_useful_counts() -> None:
    assert useful_counts(0) == []
    assert useful_counts(5) == [1, 2, 3, 4, 5]
    assert useful_counts(40) == [1, 2, 3, 4, 5, 6, 7, 8, 16, 24, 32, 40]


def test_table_has_empty_bundle_at_rho_current_and_improving_bids() -> None:
    offer = heterogeneous_cluster(32)
    app = AppModel("a", 0.0, [Job("j", 1.0, 1e4, 8)], placement=NETWORK_INTENSIVE)
    held = [Gpu("h0", "hm", "hr")]
    t = make_bid_table(app, held, offer, CTX)
    assert t.rho_current == rho(app, 1, Locality.SLOT, CTX)
    assert t.bids
    assert all(b.rho < t.rho_current for b in t.bids)
    assert max(len(b.gpus) for b in t.bids) <= 7  # demand 8, one GPU held
    offered = {g.id for g in offer}
    assert all(set(b.gpus) <= offered for b in t.bids)
    # A bundle's rho is the rho of held + bundle at the union's locality.
    by_id = {g.id: g for g in offer}
    for b in t.bids:
        gs = [*held, *(by_id[g] for g in b.gpus)]
        assert b.rho == rho(app, len(gs), locality_of(gs), CTX)


def test_best_placed_bundle_is_machine_local_and_prefers_held_machine() -> None:
    offer = [Gpu(f"a{i}", "ma", "r0") for i in range(4)] + [Gpu(f"b{i}", "mb", "r0") for i in range(4)]
    held = [Gpu("b-held", "mb", "r0")]
    menu = candidate_bundles(offer, held, 4, alternatives=0)
    first_two = next(b for b in menu if len(b) == 2)
    assert {g.machine for g in first_two} == {"mb"}


def test_finished_or_saturated_app_bids_nothing() -> None:
    offer = heterogeneous_cluster(8)
    app = AppModel("a", 0.0, [Job("j", 1.0, 100, 1)])
    held = [Gpu("h", "hm", "hr")]
    assert make_bid_table(app, held, offer, CTX).bids == ()


def test_menu_is_bounded() -> None:
    offer = heterogeneous_cluster(1024)
    app = AppModel("a", 0.0, [Job(f"j{i}", 1.0, 1e5, 8) for i in range(64)], kind=__import__(
        "themis.mechanism.model", fromlist=["AppKind"]).AppKind.CURVE_STOPPING)
    t = make_bid_table(app, [], offer, CTX)
    assert 0 < len(t.bids) <= 3 * len(useful_counts(512))


def test_offer_index_shared_by_bidders_gives_the_same_tables() -> None:
    import random

    from themis.mechanism.bids import OfferIndex
    from themis.mechanism.instances import random_app

    rng = random.Random(7)
    offer = heterogeneous_cluster(64)
    index = OfferIndex(offer)
    for a in range(20):
        app = random_app(rng, f"a{a}", CTX.now)
        held = [Gpu(f"h{i}", "hm", "hr", f"s{i // 2}") for i in range(rng.choice([0, 1, 2]))]
        assert make_bid_table(app, held, index, CTX) == make_bid_table(app, held, offer, CTX)


def test_previous_gpus_come_first_among_equally_placed_bundles() -> None:
    # Two identical 8-GPU machines (4 slots of 2), the app just lost the lease on mb's
    # slot s2 and holds nothing now.
    offer = [Gpu(f"{m}g{i}", m, "r0", f"s{i // 2}") for m in ("ma", "mb") for i in range(8)]
    app = AppModel("a", 0.0, [Job("j", 1.0, 1e5, 8)], placement=NETWORK_INTENSIVE)
    plain = make_bid_table(app, [], offer, CTX)
    sticky = make_bid_table(app, [], offer, CTX, previous=("mbg4", "mbg5"))
    two = [b.gpus for b in sticky.bids if len(b.gpus) == 2]
    assert two[0] == ("mbg4", "mbg5")
    assert next(b.gpus for b in sticky.bids if len(b.gpus) == 1) in (("mbg4",), ("mbg5",))
    # Same values for the same sizes (previous only breaks ties between placements) ...
    assert sorted({(len(b.gpus), b.rho) for b in sticky.bids}) == sorted(
        {(len(b.gpus), b.rho) for b in plain.bids}
    )
    # ... and ids not in the offer are ignored.
    assert make_bid_table(app, [], offer, CTX, previous=("zz",)) == plain


def test_previous_gpus_come_before_a_held_machine_with_fewer_free() -> None:
    # Traced on the mini-cluster: a one-GPU job of the app runs on nm2, whose lease is up
    # for renewal (offered again, ``previous``); the app also holds a GPU on nm1, where one
    # more is free, and nm3 has three free. A one-GPU bundle on nm1 is as good as nm2's, but
    # winning it moves the job (a restart) while nm2's renews its lease in place.
    offer = ([Gpu("nm1/0", "nm1", "r0")] + [Gpu(f"nm2/{i}", "nm2", "r0") for i in range(2)]
             + [Gpu(f"nm3/{i}", "nm3", "r0") for i in range(2)])
    held = [Gpu("nm1/held", "nm1", "r0")]
    app = AppModel("a", 0.0, [Job("j0", 1.0, 1e4, 1), Job("j1", 1.0, 1e4, 1)],
                   kind=AppKind.SUCCESSIVE_HALVING)
    for make in (make_bid_table, make_bid_table_py):
        t = make(app, held, offer, CTX, previous=("nm2/1",))
        assert next(b.gpus for b in t.bids if len(b.gpus) == 1) == ("nm2/1",), make
        # without it, the held machine's free GPU comes first (the tightest fit)
        t = make(app, held, offer, CTX)
        assert next(b.gpus for b in t.bids if len(b.gpus) == 1) == ("nm1/0",), make


def test_bids_capped_at_what_running_jobs_can_use_now() -> None:
    from themis.mechanism.model import FuturePhase

    offer = heterogeneous_cluster(64)
    # Phase of 2 jobs of demand 4; one is done. The next phase (2 jobs x 4) could use 8,
    # but only 4 GPUs can run now.
    jobs = [Job("j0", 1.0, 1e5, 4), Job("j1", 1.0, 0.0, 4, iters_total=1e5)]
    app = AppModel("a", 0.0, jobs, [FuturePhase(2, 1e5)], AppKind.SUCCESSIVE_HALVING)
    assert app.app_demand_max == 8 and app.demand_now == 4
    t = make_bid_table(app, [Gpu("h", "hm", "hr")], offer, CTX)
    assert t.bids and max(len(b.gpus) for b in t.bids) == 3
    # Between phases (nothing running) the next phase's demand applies.
    idle = AppModel("b", 0.0, [Job("j0", 1.0, 0.0, 4, iters_total=1e5)],
                    [FuturePhase(2, 1e5)], AppKind.SUCCESSIVE_HALVING)
    assert max(len(b.gpus) for b in make_bid_table(idle, [], offer, CTX).bids) == 8
