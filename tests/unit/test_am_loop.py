"""The control loop both application masters share (themis.am.master) and its lease margins
(themis.am.margins), against a fake launcher and a fake agent; the two real application
masters run it in tests/unit/test_submarine_am.py and tests/integration/test_standalone.py."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from themis.am.core import JobLaunch, LaunchCode, LaunchEvent
from themis.am.margins import LeaseMargins
from themis.am.master import AppMasterBase
from themis.am.spec import parse_spec
from themis.mechanism.bidder import AllocationInfo

# ------------------------------------------------------------------------- margins


def test_usable_placeable_and_grace() -> None:
    m = LeaseMargins(stop_lead_s=2.0, start_margin_s=5.0, grace_s=0.0)
    leases = {"a": 101.0, "b": 104.0, "c": 110.0}
    assert set(m.usable(leases, 100.0)) == {"b", "c"}  # a ends within the stop lead
    assert set(m.placeable(leases, 100.0)) == {"c"}  # b: 4 s < 2 s + 5 s
    local = LeaseMargins(grace_s=3.0)
    local.note_allocation(["x"], 100.0, 70.0)
    assert set(local.usable({"x": 100.0}, 101.0)) == {"x"}  # in grace: no round since
    assert set(local.usable({"x": 100.0}, 103.5)) == set()  # grace over
    local.note_allocation([], 0.0, 100.5)  # the expiry round came and did not renew it
    assert set(local.usable({"x": 100.0}, 101.0)) == set()
    assert local.placeable({"x": 100.0}, 101.0) == {}  # never start on an ended lease


def test_stop_lead_follows_measured_stops_capped_by_the_lease() -> None:
    stops: deque[float] = deque(maxlen=5)
    m = LeaseMargins(stop_lead_s=1.5, start_margin_s=5.0, stop_durations=stops)
    assert m.stop_lead() == 1.5
    stops.append(4.0)
    assert m.stop_lead() == pytest.approx(5.0)
    m.note_allocation(["g"], 112.0, 100.0)  # a 12 s lease
    assert m.stop_lead("g") == pytest.approx(3.0)  # a quarter of it
    assert m.start_margin("g") == pytest.approx(1.5)  # an eighth of it


@given(st.floats(0, 10), st.floats(0, 10), st.floats(0, 10),
       st.dictionaries(st.sampled_from("abcdef"), st.floats(50, 150), max_size=6),
       st.floats(60, 140))
def test_placeable_is_within_usable(lead: float, margin: float, grace: float,
                                    leases: dict[str, float], now: float) -> None:
    m = LeaseMargins(stop_lead_s=lead, start_margin_s=margin, grace_s=grace)
    placeable = m.placeable(leases, now)
    assert set(placeable) <= set(m.usable(leases, now))
    assert all(exp > now for exp in placeable.values())


# ------------------------------------------------------------------------- the loop
SPEC = {"name": "loop", "search_space": {"lr": {"type": "double", "min": 0.1, "max": 1.0}},
        "hyperband": {"max_resource": 2, "eta": 2, "brackets": [1], "steps_per_unit": 10},
        # the fake launcher's runs report steps only: nothing to rank
        "objective": {"optional": True},
        "job": {"command": "run {max_steps} {checkpoint_uri} {lr}"}}


class FakeLauncher:
    def __init__(self) -> None:
        self.events: list[LaunchEvent] = []
        self.running: dict[str, JobLaunch] = {}

    def launch(self, run: JobLaunch) -> None:
        self.running[run.job_id] = run
        self.events.append(LaunchEvent(run.job_id, LaunchCode.STARTED, step=0))

    def stop(self, job_id: str, reason: str) -> None:
        self.running.pop(job_id, None)
        self.events.append(LaunchEvent(job_id, LaunchCode.STOPPED, step=0))

    def poll(self) -> list[LaunchEvent]:
        out, self.events = self.events, []
        return out

    def live(self) -> set[str]:
        return set(self.running)


class FakeAgent:
    def __init__(self, leases: dict[str, float]) -> None:
        self.leases = leases
        self._lock = threading.Lock()
        self.connected = threading.Event()
        self.connected.set()
        self.reported: list[float] = []
        self.stopped: list[bool] = []

    def held(self) -> list[str]:
        return sorted(g for g, exp in self.leases.items() if exp > time.time())

    def report_rho(self, value: float) -> None:
        self.reported.append(value)

    def stop(self, *, unregister: bool = True, timeout: float = 5.0) -> None:
        self.stopped.append(unregister)


class FakeBidder:
    def live_rho(self, held: int, locality: Any, cluster: int = 0) -> float:
        return 2.0 + held


class LoopAm(AppMasterBase):
    """Places every runnable job on one placeable GPU; runs end at their target."""

    def __init__(self, clock: Any) -> None:
        super().__init__(parse_spec(SPEC), "loop", clock,
                         margins=LeaseMargins(start_margin_s=1.0, grace_s=0.0), report_s=2.0)
        self.launcher = FakeLauncher()
        self.finished_with: list[str] = []
        self.placed: list[tuple[dict[str, float], dict[str, float]]] = []

    def place(self, now: float, usable: dict[str, float], placeable: dict[str, float]) -> None:
        self.placed.append((usable, placeable))
        free = sorted(set(placeable))
        for job in self.core.by_remaining_work(self.core.runnable()):
            if job.id in self.launcher.live() or not free:
                continue
            self.launcher.launch(self.core.launch_for(job.id, (free.pop(),)))

    def on_finished(self, now: float, outcome: str) -> None:
        self.finished_with.append(outcome)


class Clock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


def _am() -> tuple[LoopAm, FakeAgent, Clock]:
    clock = Clock()
    am = LoopAm(clock)
    agent = FakeAgent({"g0": clock.t + 60, "g1": clock.t + 60, "g2": clock.t + 0.5})
    am.agent, am.bidder = agent, FakeBidder()  # type: ignore[assignment]
    return am, agent, clock


def _wait_reports(agent: FakeAgent, n: int) -> None:
    deadline = time.time() + 5
    while len(agent.reported) < n and time.time() < deadline:
        time.sleep(0.01)


def test_loop_places_on_placeable_gpus_reports_rho_and_finishes_once() -> None:
    am, agent, clock = _am()
    am.tick()
    usable, placeable = am.placed[-1]
    assert set(usable) == {"g0", "g1", "g2"} and set(placeable) == {"g0", "g1"}
    assert len(am.launcher.running) == 2  # both first-rung trials, one GPU each
    _wait_reports(agent, 1)
    assert agent.reported == [2.0 + 3]  # rho with the 3 GPUs held, reported once
    clock.t += 1.0
    am.tick()
    _wait_reports(agent, 2)
    assert len(agent.reported) == 1  # not before report_s
    clock.t += 1.5
    am.tick()
    _wait_reports(agent, 2)
    assert len(agent.reported) == 2
    # the trials reach their targets: the search goes on to the promoted trial, then ends
    for _ in range(5):
        for job_id, run in list(am.launcher.running.items()):
            am.launcher.running.pop(job_id)
            am.launcher.events.append(LaunchEvent(job_id, LaunchCode.REACHED,
                                                  step=run.target_steps))
        clock.t += 2.5
        am.tick()
        if am.ended:
            break
    assert am.ended and am.outcome == "done" and am.finished_with == ["done"]
    assert agent.stopped == [True]  # the agent unregistered: every lease released
    n = len(am.placed)
    am.tick()
    am.finish(clock.t, "killed")  # nothing happens twice
    assert am.finished_with == ["done"] and agent.stopped == [True] and len(am.placed) == n


def test_allocations_go_to_one_log_and_lease_lengths_to_the_margins() -> None:
    am, _, clock = _am()
    gpu = type("G", (), {"id": "g0"})()
    am.record_allocation(AllocationInfo(round_id=3, gpus=(gpu,), vias=("auction",),
                                        expiry=clock.t + 20, was_bidder=True,
                                        kept_fraction=0.5))
    assert am.rounds == [{"round": 3, "time": clock.t, "gpus": ["g0"], "vias": ["auction"],
                          "expiry": clock.t + 20, "was_bidder": True, "kept_fraction": 0.5}]
    assert am.margins.lease_len["g0"] == pytest.approx(20.0)
    assert am.rho_reported is None


def test_a_crashed_attempt_keeps_its_registration() -> None:
    am, agent, clock = _am()
    am.finish(clock.t, "crashed")
    assert agent.stopped == [False] and am.finished_with == ["crashed"]
    with pytest.raises(ValueError, match="outcome"):
        LoopAm(clock).finish(clock.t, "vanished")
