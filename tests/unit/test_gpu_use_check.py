"""The docker tests' check that no GPU is used by two containers at once
(tests/integration/stockapps.py) on hand-written NodeManager and RM log lines: it must find
the containers and flag over-use and containers outside their app's leases; and the fault
trials' check that no lease goes to an app whose AM is cut off (tests/integration/
fault_trials.py), on the same lease log."""

from __future__ import annotations

from tests.integration.fault_trials import PARTITION_NOTICE_S, cut_off_grants
from tests.integration.stockapps import (
    _ts,
    gpu_containers,
    gpu_use_violations,
    lease_events,
)

C1 = "container_1700000000000_0001_01_000002"
C2 = "container_1700000000000_0002_01_000002"
A1, A2 = "application_1700000000000_0001", "application_1700000000000_0002"


def _nm(cid: str, gpus: int, start: str, end: str) -> str:
    return (f"2026-11-25 10:00:{start},000 INFO containermanager.ContainerManagerImpl: Start "
            f"request for {cid} by user appattempt_x with resource <memory:256, vCores:1, "
            f"yarn.io/gpu: {gpus}>\n"
            f"2026-11-25 10:00:{start},100 INFO container.ContainerImpl: Container {cid} "
            "transitioned from SCHEDULED to RUNNING\n"
            f"2026-11-25 10:00:{end},000 INFO container.ContainerImpl: Container {cid} "
            "transitioned from RUNNING to EXITED_WITH_SUCCESS\n")


def _lease(app: str, at: str, gpus: int = 2) -> str:
    return (f"2026-11-25 10:00:{at},000 INFO yarn.ThemisRuntime: Themis lease 1: {gpus} GPU(s) "
            f"on nm1:8041 to {app} until 1795577116374\n")


def test_disjoint_containers_under_leases_pass() -> None:
    logs = {"nm1": _nm(C1, 2, "01", "10") + _nm(C2, 2, "11", "20")}
    rm = _lease(A1, "00") + _lease(A2, "10")
    assert len(gpu_containers(logs)) == 2
    assert gpu_use_violations(logs, {"nm1": 2}, rm, lease_s=30, grace_s=0) == []


def test_overlapping_containers_are_flagged() -> None:
    logs = {"nm1": _nm(C1, 2, "01", "15") + _nm(C2, 2, "11", "20")}
    rm = _lease(A1, "00") + _lease(A2, "10")
    bad = gpu_use_violations(logs, {"nm1": 2}, rm, lease_s=30, grace_s=0)
    assert any("4 GPUs in use" in b for b in bad), bad


def test_a_container_without_or_past_its_lease_is_flagged() -> None:
    logs = {"nm1": _nm(C1, 2, "01", "50")}
    assert any("without a lease" in b for b in gpu_use_violations(
        logs, {"nm1": 4}, _lease(A2, "00"), lease_s=30, grace_s=0))
    assert any("past its app's leases" in b for b in gpu_use_violations(
        logs, {"nm1": 4}, _lease(A1, "00"), lease_s=30, grace_s=0, slack_s=5))


def _renewal(app: str, at: str) -> str:
    return (f"2026-11-25 10:00:{at},000 INFO lease.LeaseEnforcer: Themis lease 7 of {app} on "
            "nm2:8041 renewed: 1 GPU(s) in use until 1795577116374 (60000=hold, at 0)\n")


def test_lease_events_read_grants_and_renewals_in_order() -> None:
    events = lease_events(_lease(A1, "00", gpus=3) + "noise\n" + _renewal(A2, "05"))
    assert [(e.app, e.host, e.gpus) for e in events] == [(A1, "nm1", 3), (A2, "nm2", None)]
    assert events[1].t - events[0].t == 5.0


def test_a_grant_inside_a_cut_is_reported_and_renewals_or_grants_outside_are_not() -> None:
    cut = _ts("2026-11-25 10:00:00,000")
    late = f"{int(PARTITION_NOTICE_S) + 5:02d}"  # after the arbiter could notice the cut
    log = (_lease(A1, "01") + _lease(A1, late) + _renewal(A1, late) + _lease(A2, late))
    assert cut_off_grants(log, [(A1, cut, cut + 50)]) == [
        f"{A1}: 2 GPU(s) on nm1 granted {PARTITION_NOTICE_S + 5:.1f} s into the cut"]
    assert cut_off_grants(log, [(A1, cut, cut + PARTITION_NOTICE_S)]) == []  # healed before
