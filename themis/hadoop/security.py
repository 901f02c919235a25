"""Credentials of the Themis application master (docs/yarn.md, "Security").

* **Registration** with the agents' endpoint: the AM's AMRMToken, read from its container's
  credentials by the JVM shell (``AmShell.amRmToken``) each time the agent registers (the
  token rolls over with the RM's master key).
* **TLS** to the agents' endpoint: ``themis submit`` puts the CA certificate(s) the cluster
  names (``yarn.resourcemanager.themis.agent-tls.trust-file``) into the AM's environment as
  ``THEMIS_ARBITER_TLS_CA`` (base64 PEM), or ``THEMIS_ARBITER_TLS=off`` when the cluster turned
  TLS off.
* **Progress reports** (``POST /api/report``): each job container gets its own token
  (HMAC of its container id under a key the AM draws at start) in ``THEMIS_REPORT_TOKEN``;
  its runner sends it in the ``X-Themis-Report-Token`` header and its container id in
  ``X-Themis-Container``. A report without a token is refused with 401, with a wrong one (or
  another container's) with 403, before the AM reads its body
  (:mod:`themis.am.launchers.yarn.report`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when used: job containers' runners import this module too
    import grpc

REPORT_TOKEN_ENV = "THEMIS_REPORT_TOKEN"
REPORT_TOKEN_HEADER = "X-Themis-Report-Token"
REPORT_CONTAINER_HEADER = "X-Themis-Container"
ARBITER_TLS_ENV = "THEMIS_ARBITER_TLS"  # "off", or absent / "on"
ARBITER_CA_ENV = "THEMIS_ARBITER_TLS_CA"  # base64 of the PEM CA certificate(s)
MAX_REPORT_TOKEN = 256  # characters
MAX_CONTAINER_ID = 256  # characters


class ReportTokens:
    """Per-container tokens of the AM's report endpoint."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else secrets.token_bytes(32)

    def token_for(self, container: str) -> str:
        return hmac.new(self._key, container.encode(), hashlib.sha256).hexdigest()

    def check(self, container: Any, token: str | None) -> tuple[int, str] | None:
        """None if ``token`` is ``container``'s, else (HTTP status, why)."""
        if not token:
            return 401, f"missing report token (header {REPORT_TOKEN_HEADER})"
        if not isinstance(container, str) or not container:
            return 403, f"a report names its container (header {REPORT_CONTAINER_HEADER})"
        if len(container) > MAX_CONTAINER_ID:
            return 403, (f"container id of {len(container)} characters (header "
                         f"{REPORT_CONTAINER_HEADER}; at most {MAX_CONTAINER_ID})")
        if len(token) > MAX_REPORT_TOKEN or not hmac.compare_digest(
                self.token_for(container).encode(), token.encode()):
            return 403, f"wrong report token for container {container[:128]!r}"
        return None


def agent_tls(env: Mapping[str, str]) -> grpc.ChannelCredentials | None:
    """The agent's channel credentials from the AM's environment; None when the cluster
    turned TLS off. Raises ValueError naming the variable when TLS is on without a CA."""
    mode = env.get(ARBITER_TLS_ENV, "on").strip().lower() or "on"
    if mode == "off":
        return None
    if mode != "on":
        raise ValueError(f"${ARBITER_TLS_ENV}={mode!r}: must be on or off")
    raw = env.get(ARBITER_CA_ENV, "")
    if not raw:
        raise ValueError(f"the agents' endpoint serves TLS but ${ARBITER_CA_ENV} (the CA "
                         "certificate, set by themis submit) is empty")
    try:
        pem = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"${ARBITER_CA_ENV}: not base64") from None
    if b"-----BEGIN CERTIFICATE" not in pem:
        raise ValueError(f"${ARBITER_CA_ENV}: not a PEM certificate")
    import grpc

    return grpc.ssl_channel_credentials(pem)


def agent_options(env: Mapping[str, str], shell_entry_point: Any) -> dict[str, Any]:
    """Keyword arguments of the AM's :class:`~themis.agent.client.AgentClient`: the
    registration token (asked of the JVM shell at each registration) and TLS."""
    token: Callable[[], str] = lambda: str(shell_entry_point.amRmToken())  # noqa: E731
    return {"registration_token": token, "tls": agent_tls(env)}
