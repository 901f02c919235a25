"""YARN node labels in the engine's rounds (themis.yarn.partitions, docs/yarn.md
"Partitions"): a partition's free GPUs go only to the apps that ask for it, an exclusive
partition's never to anyone else, a non-exclusive partition's idle ones to default-partition
apps; queue guarantees and maxima apply per partition."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themis.yarn.rounds import RoundEngine
from themis.yarn.view import ViewError, parse_view

Json = dict[str, Any]


def _view(nodes: Sequence[tuple[str, int, int]], apps: Sequence[Json],
          labels: Mapping[str, bool] | None = None,
          queues: Sequence[Json] | None = None, leases: Sequence[Json] = ()) -> Json:
    """``nodes``: (partition, total, free) per node ``n<i>:1``; ``labels``: label ->
    exclusive; ``queues``: as the RM sends them."""
    out: Json = {
        "round": 1, "now_ms": 1_000_000, "fairness_knob": 0.5,
        "lease_duration_ms": 60_000, "solver": "auto",
        "nodes": [{"node_id": f"n{i}:1", "host": f"n{i}", "rack": "/r", "total_gpus": t,
                   "free_gpus": f, "partition": p} for i, (p, t, f) in enumerate(nodes)],
        "apps": list(apps), "leases": list(leases),
        "partitions": [{"partition": k, "exclusive": v} for k, v in (labels or {}).items()],
    }
    if queues is not None:
        out["queues"] = list(queues)
    return out


def _app(app_id: str, gpus: int, partition: str = "", queue: str | None = None,
         accessible: Sequence[str] | None = None,
         running: Mapping[str, int] | None = None) -> Json:
    out: Json = {"app_id": app_id, "pending_gpus": gpus, "running_gpus": dict(running or {}),
                 "asks": [{"gpus_per_container": 1, "containers": gpus}] if gpus else [],
                 "partition": partition}
    if queue is not None:
        out["queue"] = queue
    if accessible is not None:
        out["accessible_partitions"] = list(accessible)
    return out


def _queue(name: str, guaranteed: int, limit: int,
           labels: Mapping[str, tuple[int, int]] | None = None) -> Json:
    return {"queue": name, "guaranteed_gpus": guaranteed, "max_gpus": limit,
            "partitions": {k: {"guaranteed_gpus": g, "max_gpus": m}
                           for k, (g, m) in (labels or {}).items()}}


def _run(view: Json) -> tuple[Counter[tuple[str, str]], Json]:
    reply = json.loads(RoundEngine().run(json.dumps(view)))
    out: Counter[tuple[str, str]] = Counter()
    for g in reply["grants"]:
        out[(g["app_id"], g["node_id"])] += g["gpus"]
    return out, reply["info"]


def _per_app(grants: Counter[tuple[str, str]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for (app, _), n in grants.items():
        out[app] += n
    return out


# n0: default partition (2 GPUs), n1 and n2: label "gpu" (4 GPUs each)
NODES = [("", 2, 2), ("gpu", 4, 4), ("gpu", 4, 4)]


def test_an_exclusive_partition_is_never_offered_to_a_default_app() -> None:
    grants, _ = _run(_view(NODES, [_app("plain", 10)], {"gpu": True}))
    assert grants == {("plain", "n0:1"): 2}  # the 8 idle "gpu" GPUs stay idle


def test_an_exclusive_partition_serves_only_its_own_apps() -> None:
    apps = [_app("plain", 10), _app("labeled", 10, "gpu", accessible=["gpu"])]
    grants, _ = _run(_view(NODES, apps, {"gpu": True}))
    assert grants == {("plain", "n0:1"): 2, ("labeled", "n1:1"): 4, ("labeled", "n2:1"): 4}


def test_a_label_not_listed_counts_as_exclusive() -> None:
    grants, _ = _run(_view(NODES, [_app("plain", 10)]))
    assert _per_app(grants) == {"plain": 2}


def test_idle_gpus_of_a_non_exclusive_partition_reach_default_apps() -> None:
    apps = [_app("plain", 5), _app("labeled", 3, "gpu", accessible=["gpu"])]
    grants, info = _run(_view(NODES, apps, {"gpu": False}))
    per = _per_app(grants)
    # the labeled app first takes what it asks in its partition; default apps get the rest
    assert per == {"labeled": 3, "plain": 5}
    assert grants[("plain", "n0:1")] == 2
    on_gpu = {n for (a, n) in grants if a == "labeled"}
    assert on_gpu <= {"n1:1", "n2:1"}
    assert info["partitions"]["gpu"]["lent_to_default"] == {"plain": 3}


def test_a_non_exclusive_partition_serves_its_own_apps_first() -> None:
    apps = [_app("plain", 20), _app("labeled", 8, "gpu", accessible=["gpu"])]
    grants, _ = _run(_view(NODES, apps, {"gpu": False}))
    assert _per_app(grants) == {"labeled": 8, "plain": 2}


def test_an_app_whose_queue_may_not_access_the_label_gets_none_of_it() -> None:
    apps = [_app("outsider", 4, "gpu", accessible=[]),
            _app("anyone", 2, "gpu", accessible=["*"])]
    grants, _ = _run(_view(NODES, apps, {"gpu": True}))
    assert _per_app(grants) == {"anyone": 2}


def test_labeled_apps_never_take_default_partition_gpus() -> None:
    grants, _ = _run(_view([("", 4, 4), ("gpu", 2, 2)],
                           [_app("labeled", 6, "gpu", accessible=["gpu"])], {"gpu": False}))
    assert grants == {("labeled", "n1:1"): 2}


def test_queue_guarantees_apply_per_label() -> None:
    # default partition: a 75 %, b 25 % of 2; label gpu: a 25 %, b 75 % of 8
    queues = [_queue("root.a", 1, 2, {"gpu": (2, 8)}), _queue("root.b", 1, 2, {"gpu": (6, 8)})]
    apps = [_app("a1", 8, "gpu", "root.a", ["gpu"]), _app("b1", 8, "gpu", "root.b", ["gpu"]),
            _app("a0", 4, "", "root.a", ["gpu"]), _app("b0", 4, "", "root.b", ["gpu"])]
    grants, info = _run(_view(NODES, apps, {"gpu": True}, queues))
    assert _per_app(grants) == {"a1": 2, "b1": 6, "a0": 1, "b0": 1}
    labeled = info["partitions"]["gpu"]["queues"]
    assert labeled["root.a"]["guaranteed_gpus"] == 2
    assert labeled["root.b"]["granted_guarantee_gpus"] == 6
    assert info["queues"]["root.a"]["guaranteed_gpus"] == 1


def test_held_gpus_count_in_the_partition_they_are_in() -> None:
    # a1 holds 4 GPUs of the default partition (from earlier asks) and none of "gpu": in
    # "gpu" queue a is still below its guarantee, so a1 and b1 get 4 each
    queues = [_queue("root.a", 1, 4, {"gpu": (4, 8)}), _queue("root.b", 1, 4, {"gpu": (4, 8)})]
    apps = [_app("a1", 4, "gpu", "root.a", ["gpu"], running={"n0:1": 4}),
            _app("b1", 8, "gpu", "root.b", ["gpu"])]
    grants, info = _run(_view([("", 4, 0), ("gpu", 4, 4), ("gpu", 4, 4)], apps, {"gpu": True},
                              queues))
    assert _per_app(grants) == {"a1": 4, "b1": 4}
    assert info["partitions"]["gpu"]["queues"]["root.a"]["held_gpus"] == 0


def test_what_apps_asking_nothing_hold_counts_against_their_queues_maximum() -> None:
    # queue a (maximum 1 GPU in each partition) holds 1 through a0, which asks nothing more:
    # a1 of the same queue gets none, in the default partition and in "gpu" alike
    for part in ("", "gpu"):
        queues = [_queue("root.a", 0, 1, {"gpu": (0, 1)})]
        apps = [_app("a0", 0, part, "root.a", ["gpu"], running={"n1:1" if part else "n0:1": 1}),
                _app("a1", 1, part, "root.a", ["gpu"])]
        grants, _ = _run(_view([("", 2, 1), ("gpu", 2, 1)], apps, {"gpu": True}, queues))
        assert not grants, (part, grants)


def test_a_queue_without_capacity_in_a_label_borrows_only_up_to_its_maximum_there() -> None:
    queues = [_queue("root.a", 2, 2, {"gpu": (8, 8)}), _queue("root.b", 0, 2, {"gpu": (0, 3)})]
    apps = [_app("b1", 8, "gpu", "root.b", ["gpu"])]
    grants, _ = _run(_view(NODES, apps, {"gpu": True}, queues))
    assert _per_app(grants) == {"b1": 3}


def test_a_view_without_partitions_is_the_default_partition() -> None:
    view = _view(NODES, [_app("plain", 4)])
    for n in view["nodes"]:
        del n["partition"]
    del view["partitions"]
    del view["apps"][0]["partition"]
    grants, info = _run(view)
    assert _per_app(grants) == {"plain": 4}
    assert "partitions" not in info


def test_malformed_partition_fields_are_refused() -> None:
    bad = _view(NODES, [_app("plain", 1)], {"gpu": True})
    bad["partitions"][0]["exclusive"] = "yes"
    with pytest.raises(ViewError, match="exclusive"):
        parse_view(json.dumps(bad))
    bad = _view(NODES, [_app("plain", 1, accessible=["gpu"])])
    bad["apps"][0]["accessible_partitions"] = "gpu"
    with pytest.raises(ViewError, match="accessible_partitions"):
        parse_view(json.dumps(bad))
    bad = _view(NODES, [_app("plain", 1, queue="root.a")],
                queues=[_queue("root.a", 1, 2, {"gpu": (3, 2)})])
    with pytest.raises(ViewError, match="gpu"):
        parse_view(json.dumps(bad))


@settings(max_examples=60, deadline=None)
@given(nodes=st.lists(st.tuples(st.sampled_from(["", "x", "y"]), st.integers(0, 4),
                                st.integers(0, 4)), min_size=1, max_size=5),
       apps=st.lists(st.tuples(st.sampled_from(["", "x", "y"]), st.integers(0, 6)),
                     min_size=1, max_size=5),
       x_exclusive=st.booleans())
def test_no_gpu_leaves_its_partition_except_non_exclusive_to_default(
        nodes: list[tuple[str, int, int]], apps: list[tuple[str, int]],
        x_exclusive: bool) -> None:
    nodes = [(p, t, min(t, f)) for p, t, f in nodes]
    view = _view(nodes, [_app(f"app{i}_{p or 'default'}", n, p, accessible=["x", "y"])
                         for i, (p, n) in enumerate(apps)], {"x": x_exclusive, "y": True})
    grants, _ = _run(view)
    part = {f"n{i}:1": p for i, (p, _, _) in enumerate(nodes)}
    free = {f"n{i}:1": f for i, (_, _, f) in enumerate(nodes)}
    asked = {f"app{i}_{p or 'default'}": (p, n) for i, (p, n) in enumerate(apps)}
    used: Counter[str] = Counter()
    for (app, node), n in grants.items():
        used[node] += n
        mine, want = asked[app]
        node_part = part[node]
        assert node_part == mine or (mine == "" and node_part == "x" and not x_exclusive), \
            (app, node, node_part)
    assert all(used[n] <= free[n] for n in used)
    for app, (_, want) in asked.items():
        assert _per_app(grants)[app] <= want
