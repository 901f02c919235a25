"""Agent bid tables: menu shape, rho of held + bundle, useful counts, placement."""

from __future__ import annotations

from themis.agent.bids import candidate_bundles, make_bid_table, useful_counts
from themis.agent.fairness import FairnessContext, rho
from themis.agent.model import AppModel, Job
from themis.agent.placement import NETWORK_INTENSIVE
from themis.arbiter.instances import heterogeneous_cluster
from themis.cluster.topology import Gpu, Locality, locality_of

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
        "themis.agent.model", fromlist=["AppKind"]).AppKind.CURVE_STOPPING)
    t = make_bid_table(app, [], offer, CTX)
    assert 0 < len(t.bids) <= 3 * len(useful_counts(512))
