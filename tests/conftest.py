"""Suite-wide rules.

* TensorFlow and OR-Tools cannot always share a process (OR-Tools 9.15's CP-SAT segfaults
  after ``import tensorflow`` 2.21). Tests run TensorFlow in subprocesses; the few that
  must import it here carry ``@pytest.mark.tensorflow`` and scripts/test.sh runs them in a
  pytest process of their own. A test without the mark that leaves TensorFlow imported
  fails, naming itself, so the split cannot rot unnoticed.
* ``THEMIS_PYTEST_CURRENT=<file>``: the id of each test is written there as it starts, so
  that scripts/test.sh can name the test that was running when the process died of a
  signal (a segfault leaves no pytest summary).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

_CURRENT = os.environ.get("THEMIS_PYTEST_CURRENT")


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    if _CURRENT:
        with open(_CURRENT, "w", encoding="utf-8") as f:
            f.write(nodeid + "\n")


def pytest_collection_finish(session: pytest.Session) -> None:
    if "tensorflow" in sys.modules and not any(
        item.get_closest_marker("tensorflow") for item in session.items
    ):
        raise pytest.UsageError(
            "a test module imported TensorFlow at collection: import it inside the test, "
            "in a subprocess, or mark the module with pytest.mark.tensorflow")


@pytest.fixture(autouse=True)
def _tensorflow_stays_out(request: pytest.FixtureRequest) -> Iterator[None]:
    before = "tensorflow" in sys.modules
    yield
    if (not before and "tensorflow" in sys.modules
            and request.node.get_closest_marker("tensorflow") is None):
        pytest.fail("this test imported TensorFlow into the pytest process: run TensorFlow "
                    "in a subprocess or mark the test with pytest.mark.tensorflow "
                    "(TensorFlow and OR-Tools cannot share a process)", pytrace=False)
