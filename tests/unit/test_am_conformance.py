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
