"""Registration check of the agents' endpoint under YARN (docs/yarn.md, "Security").

An application master proves it is its app's AM with its AMRMToken: the RM put the token into
the AM container's credentials, the AM's JVM shell hands it to the Python AM
(``AmShell.amRmToken``), the agent sends it in ``RegisterAppRequest.registration_token`` and
this registrar asks the RM (``verifyAmToken`` on its gateway; ``org.themis.yarn.engine.AmTokens``)
whether its RM issued it, for this app, for the app's current attempt, while the app runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Protocol

from themis.arbiter.errors import CallError, Code
from themis.arbiter.registration import check_shape


class TokenChecker(Protocol):
    """The RM's gateway entry point (Java ``EngineSupervisor.Registry``), as far as tokens go."""

    def verifyAmToken(self, app_id: str, token: str) -> str: ...  # Java method name


class AmRmTokenRegistrar:
    """:class:`~themis.arbiter.registration.Registrar` that asks the RM. ``rm`` returns the
    RM's gateway entry point, or None while the engine is not connected to it yet."""

    def __init__(self, rm: Callable[[], TokenChecker | None]) -> None:
        self._rm = rm

    def check(self, app_id: str, token: str) -> None:
        check_shape(app_id, token)
        rm = self._rm()
        if rm is None:
            raise CallError(Code.FAILED_PRECONDITION,
                            "the ResourceManager is not connected to the engine yet")
        try:
            reply = json.loads(rm.verifyAmToken(app_id, token))
        except Exception as exc:  # Py4J errors, a reply that is not JSON
            raise CallError(Code.FAILED_PRECONDITION,
                            f"app {app_id!r}: could not ask the ResourceManager to check the "
                            f"registration token: {type(exc).__name__}") from exc
        if not isinstance(reply, dict) or reply.get("ok") is not True:
            why = reply.get("error", "refused") if isinstance(reply, dict) else "refused"
            raise CallError(Code.PERMISSION_DENIED, f"app {app_id!r}: {why}")
