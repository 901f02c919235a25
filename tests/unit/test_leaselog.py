"""The persisted lease log (themis.arbiter.leaselog): replay rules, damage handling, and an
arbiter core that writes its grants ahead and honours a previous arbiter's leases."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from themis.arbiter.cluster_backend import uniform_cluster
from themis.arbiter.config import ArbiterConfig
from themis.arbiter.leaselog import HEADER, LeaseLog, LeaseLogError, read_log
from themis.arbiter.state import ArbiterCore
from themis.mechanism.round import LeaseGrant

GPUS = [f"m0-g{i}" for i in range(4)]


def _write(path: Path, *records: object, header: bool = True, tail: str = "") -> None:
    lines = ([json.dumps(HEADER)] if header else []) + [json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n" + tail)


def _grant(app: str, gpus: list[str], expiry: float, start: float = 0.0) -> dict[str, object]:
    return {"op": "grant", "app": app, "gpus": gpus, "start": start, "expiry": expiry,
            "via": "auction"}


def test_replay_keeps_live_leases_latest_record_wins_and_compacts(tmp_path: Path) -> None:
    p = tmp_path / "leases.jsonl"
    _write(p,
           _grant("a", ["m0-g0", "m0-g1"], 200.0),
           _grant("b", ["m0-g2"], 50.0),               # expired at now = 100
           {"op": "release", "gpus": ["m0-g1"]},       # a gave m0-g1 back
           _grant("c", ["m0-g3"], 150.0),
           _grant("d", ["m0-g3"], 300.0, start=160.0),  # later grant of m0-g3 wins
           _grant("e", ["gone-g9"], 300.0))            # not in the cluster: dropped
    grants = LeaseLog(p).open(100.0, GPUS)
    assert grants == [LeaseGrant("a", ("m0-g0",), 0.0, 200.0, "auction"),
                      LeaseGrant("d", ("m0-g3",), 160.0, 300.0, "auction")]
    assert p.read_text().count("\n") == 3  # header + the two live leases
    assert set(read_log(p)) == {"m0-g0", "m0-g3"}


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    p = tmp_path / "leases.jsonl"
    _write(p, _grant("a", ["m0-g0"], 200.0), tail='{"op":"grant","app":"b","gp')
    assert [g.app_id for g in LeaseLog(p).open(100.0, GPUS)] == ["a"]


@pytest.mark.parametrize(("body", "message"), [
    ("not json", "lease log .*:2: not a JSON record"),
    ('{"op": "lease", "gpus": []}', ":2: op 'lease' must be"),
    ('{"op": "grant", "app": "a", "gpus": ["m0-g0"], "start": 0, "expiry": "x"}',
     ":2: expiry must be a finite number"),
    ('{"op": "release", "gpus": [1]}', ":2: gpus must be a list of GPU ids"),
    ("[1]", ":2: a record must be a JSON object"),
])
def test_a_damaged_record_stops_the_arbiter_naming_the_line(tmp_path: Path, body: str,
                                                            message: str) -> None:
    p = tmp_path / "leases.jsonl"
    p.write_text(json.dumps(HEADER) + "\n" + body + "\n")
    with pytest.raises(LeaseLogError, match=message):
        LeaseLog(p).open(100.0, GPUS)


def test_a_file_that_is_not_a_lease_log_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "leases.jsonl"
    p.write_text('{"something": "else"}\n')
    with pytest.raises(LeaseLogError, match=":1: expected the header"):
        LeaseLog(p).open(100.0, GPUS)
    p.write_bytes(b"\xff\xfe\n")
    with pytest.raises(LeaseLogError, match="not UTF-8"):
        LeaseLog(p).open(100.0, GPUS)


def test_appends_are_replayed_and_compaction_keeps_only_what_is_live(tmp_path: Path) -> None:
    p = tmp_path / "leases.jsonl"
    lg = LeaseLog(p, compact_after=2)
    assert lg.open(0.0, GPUS) == []
    lg.grants([LeaseGrant("a", ("m0-g0", "m0-g1"), 1.0, 500.0, "auction")])
    lg.release(["m0-g1"])
    assert not lg.needs_compaction
    lg.grants([LeaseGrant("b", ("m0-g2",), 2.0, 500.0, "leftover")])
    assert lg.needs_compaction
    lg.compact([LeaseGrant("a", ("m0-g0",), 1.0, 500.0, "auction"),
                LeaseGrant("b", ("m0-g2",), 2.0, 500.0, "leftover")])
    lg.release(["m0-g0"])
    lg.close()
    assert {g: x.app_id for g, x in read_log(p).items()} == {"m0-g2": "b"}


def _core(path: Path, log: LeaseLog | None = None) -> ArbiterCore:
    cfg = ArbiterConfig(lease_s=30.0, bid_timeout_s=0.05, warning_s=1.0, heartbeat_s=1.0,
                        round_delay_s=0.0, solver="open-fast")
    return ArbiterCore(uniform_cluster(1, 4), cfg, lease_log=log or LeaseLog(path))


def _one_round(core: ArbiterCore, app: str) -> None:
    core.start()
    try:
        secret = core.register(app, float("inf"), 4).secret
        core.open_stream(app, secret)  # connected; it does not bid: leftover to it
        assert core.wait_rounds(1, timeout=10)
    finally:
        core.stop()


def test_a_restarted_core_honours_the_leases_of_the_one_before(tmp_path: Path) -> None:
    p = tmp_path / "leases.jsonl"
    first = _core(p)
    _one_round(first, "a")
    held = sorted(first.backend.owners())
    assert held and set(read_log(p)) == set(held)  # written ahead of the allocation

    second = _core(p)  # the first "crashed": nothing was released
    assert sorted(second.backend.owners()) == held
    assert not {g.id for g in second.backend.free_gpus()} & set(held)
    secret = second.register("a", 1.0, 4).secret
    _, events = second.open_stream("a", secret)
    hello = events.get_nowait()
    assert hello is not None
    assert sorted(g for x in hello.hello.leases for g in x.gpu_ids) == held

    second.unregister("a", secret)  # gives them back, in the log too
    assert read_log(p) == {}
    assert _core(p).backend.owners() == {}


def test_expired_leases_are_not_restored(tmp_path: Path) -> None:
    p = tmp_path / "leases.jsonl"
    _write(p, _grant("a", ["m0-g0"], time.time() - 1), _grant("b", ["m0-g1"], time.time() + 60))
    assert _core(p).backend.owners() == {"m0-g1": "b"}


class _BrokenLog(LeaseLog):
    def grants(self, grants: Sequence[LeaseGrant]) -> None:
        raise LeaseLogError(f"lease log {self.path}: No space left on device")


def test_grants_that_cannot_be_written_are_withdrawn(tmp_path: Path) -> None:
    p = tmp_path / "leases.jsonl"
    core = _core(p, _BrokenLog(p))
    _one_round(core, "a")
    assert core.backend.owners() == {}
    assert core.snapshot()["leases"] == {}
