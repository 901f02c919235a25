"""The launcher conformance suite (themis.testing.am_conformance) for both launchers:
local processes (real processes of a small job program) and YARN containers through a
fake JVM shell (real containers: tests/integration/test_am_e2e.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from themis.testing.am_conformance import LauncherConformance, LocalHarness, YarnHarness


class TestLocalProcessLauncher(LauncherConformance):
    @pytest.fixture()
    def harness_factory(self, tmp_path: Path) -> Callable[[], LocalHarness]:
        return lambda: LocalHarness(tmp_path)


class TestYarnContainerLauncher(LauncherConformance):
    @pytest.fixture()
    def harness_factory(self) -> Callable[[], YarnHarness]:
        checkpoints: dict[str, int] = {}  # in HDFS: shared by AM attempts
        return lambda: YarnHarness(checkpoints)


def test_run_that_reached_the_old_rung_target_does_not_finish_the_promoted_job() -> None:
    """A run exits at its own target after its job was promoted (the rung completed from
    progress reports first): the job's new, higher target is not marked reached."""
    from themis.am.core import AmCore, LaunchCode, LaunchEvent
    from themis.am.spec import parse_spec

    spec = parse_spec({"name": "p", "search_space": {"lr": {"type": "double", "min": 0.1,
                                                            "max": 1.0}},
                       "hyperband": {"max_resource": 2, "eta": 2, "brackets": [1],
                                     "steps_per_unit": 10},
                       "job": {"command": "run {max_steps} {checkpoint_uri} {lr}"}})
    core = AmCore(spec, "p", clock=lambda: 0.0)
    a, b = sorted(core.hb.jobs)
    core.progress(a, 10, 0.1)
    core.progress(b, 10, 0.9)  # rung 0 done: a promoted to 20 steps
    assert core.hb.jobs[a].target_steps == 20
    core.apply(LaunchEvent(a, LaunchCode.REACHED, step=10, status=0))
    assert core.hb.jobs[a].status.value == "running" and not core.hb.done
    core.apply(LaunchEvent(a, LaunchCode.REACHED, step=20, status=0))
    assert core.hb.done
