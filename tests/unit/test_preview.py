"""``themis preview``'s pieces on a saved ResourceManager response: reading the apps
(tests/unit/data/preview-apps.json, shaped like GET /ws/v1/cluster/apps of Hadoop 3.4 with
yarn.io/gpu in resourceSecondsMap), which apps are kept, what is inferred, the trace the
simulator gets, the topology and the current policy. Expectations are computed by hand in
the comments.

The fixture (startedTime T0 = 2025-12-01T00:00:00Z = 1764547200000 ms):

| # | app | state | GPU-seconds | runtime (elapsed) | kept? | GPUs |
|---|---|---|---|---|---|---|
| 1 | resnet50-train | FINISHED | 14400 | 3600 s | yes | 14400/3600 = 4 |
| 2 | bert-finetune | FINISHED | 14400 | 7200 s (AM launched after 1800 s) | yes | 2 (launch: 14400/5400 = 2.67 -> 3) |
| 3 | wordcount (MAPREDUCE) | FINISHED | none | 600 s | no GPU | |
| 4 | gan-sweep | KILLED | 4500 (repeated "entry" keys) | 1800 s | yes | 2.5 -> 3 (half up) |
| 5 | spark-etl | FAILED | none (one entry, an object) | | no GPU | |
| 6 | long-train | RUNNING | 7200 | | state | |
| 7 | gpu-smoke-test | FINISHED | 0 | 60 s | no GPU | |
| 8 | distributed-train | FINISHED | 43200 | 5400 s | yes | 8 |
| 9 | old-app | FINISHED, a day before T0 | 3600 | 3600 s | yes (outside --since T0) | 1 |
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themis.preview.cluster import (
    current_from_conf,
    current_from_scheduler,
    current_given,
    topology_from_nodes,
    uniform_topology,
)
from themis.preview.history import (
    GPU_RESOURCE,
    PreviewError,
    parse_json,
    read_app,
    read_apps,
)
from themis.preview.trace import Window, infer_gpus, select, to_workload

DATA = Path(__file__).parent / "data"
APPS = DATA / "preview-apps.json"
T0 = 1764547200000
PREFIX = "application_1764540000000_"


def _history() -> list[Any]:
    return read_apps(parse_json(APPS.read_bytes(), "apps.json"), "apps.json")


def _app(**fields: Any) -> dict[str, Any]:
    """A minimal finished app as the RM reports it."""
    doc: dict[str, Any] = {
        "id": "application_1_0001", "name": "a", "user": "u", "queue": "root.default",
        "state": "FINISHED", "finalStatus": "SUCCEEDED", "applicationType": "YARN",
        "startedTime": T0, "finishedTime": T0 + 3_600_000, "elapsedTime": 3_600_000,
        "resourceSecondsMap": {"entry": [{"key": "memory-mb", "value": "1024"},
                                         {"key": GPU_RESOURCE, "value": "7200"}]},
    }
    doc.update(fields)
    return doc


# ------------------------------------------------------------------ reading the response


def test_every_app_is_read_with_its_gpu_seconds_in_all_three_map_forms() -> None:
    apps = _history()
    assert [a.number for a in apps] == list(range(1, 10))
    by = {a.id.removeprefix(PREFIX): a for a in apps}
    assert by["0001"].gpu_seconds == 14400.0 and by["0001"].name == "resnet50-train"
    assert by["0001"].user == "alice" and by["0001"].queue == "root.default"
    # entries as a list, as repeated "entry" keys (Hadoop's docs), as a single object
    assert by["0004"].gpu_seconds == 4500.0
    assert by["0005"].gpu_seconds is None  # one entry, memory-mb only
    assert by["0003"].gpu_seconds is None and by["0007"].gpu_seconds == 0.0
    assert by["0006"].finished is False and by["0002"].launch_ms == T0 + 600_000 + 1_800_000
    assert by["0008"].observed_jct_s == 5400.0


def test_default_selection_keeps_the_finished_gpu_apps_and_counts_the_rest() -> None:
    sel = select(_history())
    assert [s.app.id.removeprefix(PREFIX) for s in sel.apps] == ["0009", "0001", "0002",
                                                                 "0004", "0008"]
    assert sel.read == 9
    assert sel.left_out == {"state": 1, "not_finished": 0, "outside_window": 0, "no_gpu": 3,
                            "no_runtime": 0}
    gpus = {s.app.id.removeprefix(PREFIX): s.gpus for s in sel.apps}
    assert gpus == {"0009": 1, "0001": 4, "0002": 2, "0004": 3, "0008": 8}
    assert all(s.inferred == ("gpus",) for s in sel.apps)
    assert sum(s.gpu_seconds for s in sel.apps) == 14400 + 14400 + 4500 + 43200 + 3600
    # arrivals are relative to the first kept app (old-app, a day before T0)
    arrival = {s.app.id.removeprefix(PREFIX): s.arrival_s for s in sel.apps}
    assert arrival == {"0009": 0.0, "0001": 86400.0, "0002": 87000.0, "0004": 87600.0,
                       "0008": 88200.0}
    assert sel.t0_ms == T0 - 86_400_000


def test_window_states_cap_and_runtime_from_launch() -> None:
    history = _history()
    sel = select(history, window=Window(since_ms=T0))
    assert sel.left_out["outside_window"] == 1 and len(sel.apps) == 4
    assert sel.apps[0].arrival_s == 0.0  # now resnet50-train is first
    sel = select(history, window=Window(until_ms=T0 + 600_000))  # [.., T0 + 10 min)
    assert [s.app.name for s in sel.apps] == ["old-app", "resnet50-train"]
    sel = select(history, states=["KILLED"])
    assert [s.app.name for s in sel.apps] == ["gan-sweep"] and sel.left_out["state"] == 8
    sel = select(history, cluster_gpus=4)
    capped = {s.app.name: (s.gpus, s.inferred) for s in sel.apps if s.gpus == 4}
    assert capped["distributed-train"] == (4, ("gpus", "gpus_capped"))
    assert capped["resnet50-train"] == (4, ("gpus",))
    sel = select(history, runtime_from="launch")
    assert {s.app.name: s.gpus for s in sel.apps}["bert-finetune"] == 3
    with pytest.raises(PreviewError, match="--until is not after --since"):
        Window(since_ms=T0, until_ms=T0)


def test_no_runtime_and_not_finished_are_counted() -> None:
    apps = [read_app(_app(finishedTime=T0, elapsedTime=0), 1, "f"),
            read_app(_app(id="application_1_0002", finishedTime=0, state="FINISHED"), 2, "f")]
    sel = select(apps)
    assert sel.apps == [] and sel.left_out["no_runtime"] == 1
    assert sel.left_out["not_finished"] == 1


def test_elapsed_time_stands_in_for_a_missing_finished_time() -> None:
    raw = _app()
    del raw["finishedTime"]
    a = read_app(raw, 1, "f")
    assert a.finished_ms == T0 + 3_600_000 and a.gpu_seconds == 7200.0


@given(gpus=st.integers(1, 512), runtime=st.floats(1.0, 1e7), jitter=st.floats(-0.49, 0.49))
def test_inferred_demand_is_the_average_gpus_held_rounded_half_up(
        gpus: int, runtime: float, jitter: float) -> None:
    assert infer_gpus((gpus + jitter) * runtime, runtime) == gpus
    assert infer_gpus((gpus + 0.5) * 1000.0, 1000.0) == gpus + 1  # half up, not to even
    assert infer_gpus(0.1 * runtime, runtime) == 1  # never 0


def test_the_trace_is_one_app_one_job_of_the_gpu_work() -> None:
    sel = select(_history())
    w = to_workload(sel)
    assert [a.id for a in w.apps] == [s.app.id for s in sel.apps]
    by = {a.id.removeprefix(PREFIX): a for a in w.apps}
    a = by["0008"]
    assert a.kind == "single-job" and len(a.jobs) == 1 and a.arrival == 88200.0
    assert a.jobs[0].max_demand == 8 and a.jobs[0].serial_iter_time == 1.0
    assert a.total_work == 43200.0  # GPU-seconds: 5400 s alone on its 8 GPUs
    assert a.placement == "compute" and a.model == "TENSORFLOW"


def test_a_duplicated_app_id_is_refused() -> None:
    apps = [read_app(_app(), 1, "f"), read_app(_app(), 2, "f")]
    with pytest.raises(PreviewError, match="app 2 .*appears twice"):
        to_workload(select(apps))


# ------------------------------------------------------------------ malformed input


@pytest.mark.parametrize(("text", "problem"), [
    (b"", "apps.json: empty (no JSON document)"),
    (b'{"apps": {"app": [\n {"id": "a",,}]}}', "apps.json: not JSON (line 2 col 13: Expecting "
                                               "property name enclosed in double quotes)"),
    (b'{"apps": {"app": [\n {"id": "a", "startedTime": 1', "apps.json: truncated: the JSON "
                                                          "ends early (line 2 col 30"),
    (b'[1, 2]', "apps.json: not an RM apps response"),
    (b'{"apps": {"app": 3}}', "apps.json: 'apps.app' must be a list of apps"),
    (b'{"apps": {"app": [{"id": 1}]}}', "apps.json: app 1 has no 'id'"),
    (b'{"apps": {"app": [{"id": "x", "id": "y"}]}}', "the key 'id' is repeated"),
    (b'{"apps": {"app": [{"id": "x", "startedTime": NaN}]}}', "NaN is not a JSON number"),
    (b'\xff\xfe', "apps.json: not JSON (line 1: not UTF-8 text, byte 0xff)"),
])
def test_a_malformed_body_is_one_error_naming_the_problem(text: bytes, problem: str) -> None:
    with pytest.raises(PreviewError) as exc:
        read_apps(parse_json(text, "apps.json"), "apps.json")
    assert problem in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(("change", "problem"), [
    ({"startedTime": None}, "app 7 (application_1_0001) has no 'startedTime'"),
    ({"startedTime": "yesterday"}, "'startedTime' 'yesterday' is not a number of ms"),
    ({"startedTime": -5}, "'startedTime' -5 is not a time in ms"),
    ({"finishedTime": T0 - 1}, "'finishedTime' 1764547199999 is before 'startedTime'"),
    ({"finishedTime": None, "elapsedTime": None}, "has neither 'finishedTime' nor "
                                                  "'elapsedTime'"),
    ({"name": 5}, "'name' is not a string"),
    ({"resourceSecondsMap": []}, "'resourceSecondsMap' is not an object"),
    ({"resourceSecondsMap": {"entry": 3}}, "'resourceSecondsMap.entry' is not a list"),
    ({"resourceSecondsMap": {"entry": [{"value": "1"}]}}, "resourceSecondsMap entry 1 has no "
                                                          "'key'"),
    ({"resourceSecondsMap": {"entry": [{"key": GPU_RESOURCE, "value": "lots"}]}},
     "resourceSecondsMap entry 1 (yarn.io/gpu): 'value' 'lots' is not a number"),
    ({"resourceSecondsMap": {"entry": [{"key": GPU_RESOURCE, "value": "-3"}]}},
     "is not a number of GPU-seconds >= 0"),
])
def test_a_malformed_app_names_its_number_id_and_field(change: dict[str, Any],
                                                        problem: str) -> None:
    raw = _app(**change)
    for k in [k for k, v in change.items() if v is None]:
        del raw[k]
    with pytest.raises(PreviewError) as exc:
        read_app(raw, 7, "apps.json")
    assert str(exc.value).startswith("apps.json: app 7")
    assert problem in str(exc.value) and "\n" not in str(exc.value)


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(0, APPS.stat().st_size - 2))
def test_any_truncation_of_the_saved_response_is_a_preview_error(cut: int) -> None:
    data = APPS.read_bytes()[:cut]
    with pytest.raises(PreviewError, match=r"apps\.json: (empty|truncated: the JSON ends early"
                                           r" \(line \d+ col \d+)"):
        read_apps(parse_json(data, "apps.json"), "apps.json")


# ------------------------------------------------------------------ the cluster


def test_topology_from_the_rms_nodes() -> None:
    info = topology_from_nodes(parse_json((DATA / "preview-nodes.json").read_bytes(), "n"), "n")
    assert len(info.topology) == 8 and info.nodes == 2
    assert info.skipped_no_gpu == 1 and info.skipped_state == 1  # cpu1; gpu3 UNHEALTHY
    assert set(info.topology.machines) == {"gpu1.example.com", "gpu2.example.com"}
    assert info.topology.rack_of("gpu2.example.com") == "/rack-b"
    with pytest.raises(PreviewError, match="no running node has yarn.io/gpu"):
        topology_from_nodes({"nodes": None}, "n")
    bad = {"nodes": {"node": [{"id": "h:1", "totalResource": {"resourceInformations": {
        "resourceInformation": [{"name": GPU_RESOURCE, "value": "4"}]}}}]}}
    with pytest.raises(PreviewError, match=r"node 1 \(h:1\): yarn.io/gpu value '4'"):
        topology_from_nodes(bad, "n")


def test_uniform_topology() -> None:
    info = uniform_topology(10, 4)
    assert len(info.topology) == 10 and info.nodes == 3
    assert sorted(len(g) for g in info.topology.machines.values()) == [2, 4, 4]


def _sched(kind: str, orders: tuple[str, ...] = ()) -> dict[str, Any]:
    queues = [{"queueName": f"q{i}", "orderingPolicyInfo": o} for i, o in enumerate(orders)]
    info: dict[str, Any] = {"type": kind}
    if queues:  # a parent queue with leaves under it
        info["queues"] = {"queue": [{"queueName": "p", "queues": {"queue": queues}}]}
    return {"scheduler": {"schedulerInfo": info}}


def test_the_current_policy() -> None:
    sched = json.loads((DATA / "preview-scheduler.json").read_text())
    assert current_from_scheduler(sched, "s").policy == "fifo"
    assert current_from_scheduler(_sched("fairScheduler"), "s").policy == "fairshare"
    assert current_from_scheduler(_sched("fifoScheduler"), "s").policy == "fifo"
    assert current_from_scheduler(_sched("capacityScheduler", ("fair", "fair")),
                                  "s").policy == "fairshare"
    assert current_from_scheduler(_sched("capacityScheduler", ("fair", "fifo")),
                                  "s").policy == "fifo"
    with pytest.raises(PreviewError, match="unknown scheduler type 'slurm'.*--current"):
        current_from_scheduler(_sched("slurm"), "s")
    key = "yarn.resourcemanager.scheduler.class"
    fair = "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fair.FairScheduler"
    assert current_from_conf({key: fair}, "c").policy == "fairshare"
    assert current_from_conf({key: "org.themis.yarn.ThemisCapacityScheduler"},
                             "c").scheduler == "capacity"
    assert current_from_conf({}, "c").policy == "fifo"
    assert current_given("fair", "--current").policy == "fairshare"
