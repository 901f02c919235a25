"""Themis apps' job records in the preview (themis/preview/jobrecords.py): the phases read
from the AM's state, the iteration-time fallbacks, the sources (a directory of saved copies,
WebHDFS), and the replay of such an app with its jobs (hand-computed expectations)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from themis.am.appstate import hyperband_to_dict
from themis.am.spec import parse_spec
from themis.preview.history import HistoryApp
from themis.preview.jobrecords import (
    DirRecords,
    HdfsRecords,
    RecordsUnusable,
    parse_records,
    read_records,
)
from themis.preview.trace import Selection, StockApp, to_workload, with_records

from ._fake_webhdfs import FakeWebHdfs

SPEC = parse_spec({
    "name": "hb", "search_space": {"lr": {"type": "double", "min": 1e-3, "max": 0.1}},
    "hyperband": {"max_resource": 9, "eta": 3, "steps_per_unit": 10, "brackets": [1]},
    "job": {"command": "true {max_steps}"}, "resources": {"gpus": 2}})


def _app(app_id: str = "application_1_0001", app_type: str = "THEMIS",
         gpu_seconds: float | None = 4000.0, user: str = "alice") -> HistoryApp:
    return HistoryApp(1, app_id, "hb", user, "default", app_type, "FINISHED", "SUCCEEDED",
                      1_000_000, 1_600_000, 0, gpu_seconds)


def _state(jobs: list[dict[str, Any]]) -> bytes:
    """The AM's state.json with these jobs' fields over a real plan's job records (so the
    keys are those the AM writes: themis.am.appstate.hyperband_to_dict)."""
    hb = hyperband_to_dict(SPEC.make_hyperband("application_1_0001"))
    real = hb["jobs"][0]
    hb["jobs"] = [{**real, **j} for j in jobs]
    return json.dumps({"format": 1, "hyperband": hb, "jobs": {}}).encode()


# bracket 0: three jobs ran rung 0 to 30 steps (one stopped early at 12), the best went on
# to rung 1 (target 90) and reached it
JOBS = [
    {"id": "j0", "bracket": 0, "rung": 0, "rung_start_steps": 0, "target_steps": 30,
     "steps_done": 30, "serial_iter_time": 1.0, "status": "stopped"},
    {"id": "j1", "bracket": 0, "rung": 1, "rung_start_steps": 30, "target_steps": 90,
     "steps_done": 90, "serial_iter_time": 2.0, "status": "done"},
    {"id": "j2", "bracket": 0, "rung": 0, "rung_start_steps": 0, "target_steps": 30,
     "steps_done": 12, "serial_iter_time": None, "status": "failed"},
]


def test_phases_are_the_rungs_with_the_steps_each_job_ran_there() -> None:
    r = parse_records(_app(), SPEC.to_json().encode(), _state(JOBS), "test")
    assert r.job_gpus == 2
    assert [j.id for j in r.jobs] == ["j0", "j1", "j2"]
    # rung 0: j0 30, j1 30 (to the target it went past), j2 12; rung 1: j1 60 more
    assert r.phases == (((0, 30.0), (1, 30.0), (2, 12.0)), ((1, 60.0),))
    # j2 was never measured: the median of the measured ones (1.0 and 2.0)
    assert r.iter_times == (1.0, 2.0, 1.5) and r.inferred == ()
    assert r.gpu_seconds == pytest.approx(30 * 1.0 + 30 * 2 + 12 * 1.5 + 60 * 2)


def test_a_rung_target_is_read_from_the_jobs_promoted_past_it() -> None:
    # only the promoted job is left in bracket 0's records: rung 0's target is its start
    r = parse_records(_app(), SPEC.to_json().encode(), _state([JOBS[1]]), "test")
    assert r.phases == (((0, 30.0),), ((0, 60.0),))


def test_without_any_measured_iteration_time_the_gpu_seconds_are_spread() -> None:
    jobs = [{**j, "serial_iter_time": None} for j in JOBS]
    r = parse_records(_app(gpu_seconds=264.0), SPEC.to_json().encode(), _state(jobs), "t")
    # 30 + 30 + 12 + 60 = 132 steps share 264 GPU-seconds: 2 s a step, flagged
    assert r.iter_times == (2.0, 2.0, 2.0) and r.inferred == ("iter_time",)
    with pytest.raises(RecordsUnusable, match="no iteration time"):
        parse_records(_app(gpu_seconds=None), SPEC.to_json().encode(), _state(jobs), "t")


@pytest.mark.parametrize(("state", "why"), [
    (b"{not json", "malformed"),
    (json.dumps({"format": 1}).encode(), "no 'hyperband'"),
    (json.dumps({"hyperband": {"jobs": {}}}).encode(), "not a list"),
    (_state([{**JOBS[0], "steps_done": -3}]), "'steps_done' is not a count"),
    (_state([{**JOBS[0], "serial_iter_time": "fast"}]), "serial_iter_time"),
    (_state([{**JOBS[0], "steps_done": 0}]), "no job ran a step"),
])
def test_unusable_records_say_why(state: bytes, why: str) -> None:
    with pytest.raises(RecordsUnusable, match=why):
        parse_records(_app(), SPEC.to_json().encode(), state, "test")


def test_a_malformed_spec_is_unusable() -> None:
    with pytest.raises(RecordsUnusable, match="malformed"):
        parse_records(_app(), b'{"name": 3}', _state(JOBS), "test")


def _save(root: Path, app_id: str, spec: bytes, state: bytes) -> None:
    d = root / app_id
    d.mkdir(parents=True)
    (d / "spec.json").write_bytes(spec)
    (d / "state.json").write_bytes(state)


def test_read_records_counts_every_themis_app_and_skips_the_others(tmp_path: Path) -> None:
    _save(tmp_path, "application_1_0001", SPEC.to_json().encode(), _state(JOBS))
    _save(tmp_path, "application_1_0003", SPEC.to_json().encode(), b"[]")
    _save(tmp_path, "application_1_0004", SPEC.to_json().encode(), _state(JOBS))
    apps = [_app("application_1_0001"), _app("application_1_0002"),
            _app("application_1_0003"), _app("application_1_0004", app_type="MAPREDUCE")]
    found = read_records(apps, DirRecords(tmp_path))
    assert found.outcomes == {"read": 1, "absent": 1, "unreadable": 0, "unusable": 1}
    assert set(found.by_app) == {"application_1_0001"}
    assert "no 'hyperband'" in found.problems["application_1_0003"]
    assert read_records(apps, None).outcomes == dict.fromkeys(found.outcomes, 0)


def test_an_unreadable_source_is_counted_not_fatal() -> None:
    class Refusing:
        name = "refusing"

        def fetch(self, app: HistoryApp) -> tuple[bytes, bytes] | None:
            raise PermissionError("Permission denied: user=bob, access=READ")

    found = read_records([_app()], Refusing())
    assert found.outcomes["unreadable"] == 1 and "bob" in found.problems["application_1_0001"]


@pytest.fixture
def webhdfs() -> Iterator[FakeWebHdfs]:
    fake = FakeWebHdfs()
    try:
        yield fake
    finally:
        fake.close()


def test_hdfs_records_are_read_from_the_owners_app_dir(webhdfs: FakeWebHdfs) -> None:
    d = "/user/alice/.themis/application_1_0001"
    webhdfs.files[f"{d}/spec.json"] = bytearray(SPEC.to_json().encode())
    # an interrupted atomic write leaves only the temp file: it is read (as the AM does)
    webhdfs.files[f"{d}/state.json.tmp"] = bytearray(_state(JOBS))
    webhdfs.dirs.update({"/user", "/user/alice", "/user/alice/.themis", d})
    found = read_records([_app(), _app("application_1_0002")],
                         HdfsRecords(webhdfs.url, "alice"))
    assert found.outcomes["read"] == 1 and found.outcomes["absent"] == 1
    assert found.by_app["application_1_0001"].phases[1] == ((1, 60.0),)


def test_a_themis_app_is_replayed_with_its_jobs_and_phases() -> None:
    from themis.preview.cluster import uniform_topology
    from themis.preview.replay import THEMIS, ReplayConfig, replay

    rec = parse_records(_app(), SPEC.to_json().encode(), _state(JOBS), "test")
    stock = StockApp(_app(), 0.0, 4000.0, 7, ("gpus",))
    sel = with_records(Selection([stock], 1), {rec.app_id: rec}, cluster_gpus=8)
    s = sel.apps[0]
    assert s.records is rec and s.gpus == 2 and s.inferred == ()
    spec = to_workload(sel).apps[0]
    assert spec.kind == "successive-halving" and len(spec.jobs) == 3
    assert spec.total_work == pytest.approx(rec.gpu_seconds)
    assert all(j.max_demand == 2 for j in spec.jobs)
    # alone on 8 GPUs: rung 0's slowest job (j1: 30 steps x 2 s on 2 GPUs = 30 s), then
    # rung 1 (60 x 2 s on 2 GPUs = 60 s), plus a restart pause per phase start
    res = replay(THEMIS, uniform_topology(8, 8).topology, to_workload(sel),
                 ReplayConfig(restart_seconds=0.0), progress=False)
    assert res.apps[0].jct == pytest.approx(90.0, rel=0.05)
    capped = with_records(Selection([stock], 1), {rec.app_id: rec}, cluster_gpus=1).apps[0]
    assert capped.gpus == 1 and capped.inferred == ("gpus_capped",)


def test_an_unreachable_namenode_is_tried_once() -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    source = HdfsRecords(f"http://127.0.0.1:{port}", "alice", timeout_s=5)
    calls = []
    real = source.fs.read_or_none
    source.fs.read_or_none = lambda path: calls.append(path) or real(path)  # type: ignore[method-assign]
    found = read_records([_app("application_1_0001"), _app("application_1_0002")], source)
    assert found.outcomes["unreadable"] == 2 and len(calls) == 1
    assert all("unreachable" in why for why in found.problems.values()), found.problems
