"""``python -m themis.agent.probe --until refused`` ends on the arbiter's refusal only."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any, cast

from themis.agent.probe import _await_refusal


def _client(last_error: str) -> Any:
    return SimpleNamespace(stats=SimpleNamespace(last_error=last_error))


def test_a_refused_registration_ends_the_wait() -> None:
    done = threading.Event()
    client = _client("")

    def refuse() -> None:
        time.sleep(0.2)
        client.stats.last_error = "PERMISSION_DENIED: application_1_0001 has finished"

    threading.Thread(target=refuse, daemon=True).start()
    _await_refusal(cast(Any, client), done, time.time() + 10)
    assert done.is_set()


def test_other_errors_wait_until_the_deadline() -> None:
    done = threading.Event()
    t0 = time.monotonic()
    _await_refusal(cast(Any, _client("UNAVAILABLE: connection refused")), done, time.time() + 0.3)
    assert not done.is_set() and time.monotonic() - t0 >= 0.25
