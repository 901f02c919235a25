"""Reading the ResourceManager's REST API as the user, like every other command
(:class:`themis.identity.http.HadoopSession`: ``user.name=`` on a pseudo-auth cluster,
SPNEGO with the user's Kerberos ticket on a secure one).

An RM that cannot be reached, refuses, or answers something else than a bounded body is
one :class:`~themis.preview.history.PreviewError` naming the call and the reason;
:class:`~themis.identity.http.AuthError` (no or an expired ticket) passes through.
"""

from __future__ import annotations

import re

import requests

from themis.identity.http import HadoopSession
from themis.preview.history import MAX_RESPONSE_BYTES, PreviewError
from themis.preview.trace import Window

APPS = "/ws/v1/cluster/apps"
NODES = "/ws/v1/cluster/nodes"
SCHEDULER = "/ws/v1/cluster/scheduler"
CONF = "/conf"
MAX_CONF_BYTES = 16 << 20


class Rm:
    """The RM at ``url`` (its web address, e.g. ``http://rm:8088``) as ``user``."""

    def __init__(self, url: str, user: str, timeout_s: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.session = HadoopSession(user=user)
        self.timeout_s = timeout_s

    def get(self, path: str, params: dict[str, str] | None = None,
            limit: int = MAX_RESPONSE_BYTES, accept: str = "application/json") -> bytes:
        """The body of ``GET path`` (at most ``limit`` bytes)."""
        url = f"{self.url}{path}"
        try:
            r = self.session.get(url, params=params or {}, timeout=self.timeout_s,
                                 stream=True, headers={"Accept": accept})
            body = r.raw.read(limit + 1, decode_content=True)
        except requests.Timeout:
            raise PreviewError(self.url, f"the ResourceManager did not answer GET {path} "
                                         f"within {self.timeout_s:g} s") from None
        except requests.RequestException as exc:
            raise PreviewError(self.url, f"cannot reach the ResourceManager (GET {path}: "
                                         f"{reason(exc)})") from None
        if len(body) > limit:
            raise PreviewError(url, f"the answer is larger than the limit of {limit} bytes")
        if r.status_code >= 400:
            text = body[:300].decode("utf-8", "replace").strip().splitlines()
            raise PreviewError(self.url, f"GET {path}: HTTP {r.status_code}"
                                         + (f": {text[0][:200]}" if text else ""))
        return bytes(body)

    def apps(self, states: str, window: Window) -> bytes:
        """``GET /ws/v1/cluster/apps`` with ``states`` and the window on startedTime."""
        params = {"states": states} if states else {}
        if window.since_ms is not None:
            params["startedTimeBegin"] = str(window.since_ms)
        if window.until_ms is not None:
            params["startedTimeEnd"] = str(window.until_ms - 1)  # inclusive on the RM
        return self.get(APPS, params)

    def nodes(self) -> bytes:
        return self.get(NODES)

    def scheduler(self) -> bytes:
        return self.get(SCHEDULER)

    def conf(self) -> dict[str, str]:
        """The RM's effective configuration (``/conf``, XML)."""
        from themis.hadoop.dockerrt import DaemonConfError, read_conf

        def fetch(url: str, timeout: float) -> bytes:
            try:
                # XML: Hadoop's ConfServlet answers JSON to an Accept naming JSON
                return self.get(url[len(self.url):], limit=MAX_CONF_BYTES,
                                accept="application/xml")
            except PreviewError as exc:
                raise OSError(exc.problem) from None

        try:
            return read_conf(f"{self.url}{CONF}", timeout=self.timeout_s, fetch=fetch)
        except DaemonConfError as exc:
            raise PreviewError(self.url, str(exc)) from None


def reason(exc: BaseException) -> str:
    """The short cause of a failed request (``Connection refused``, ``Name or service not
    known``), not requests' nested repr."""
    text = str(exc)
    m = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if m:
        return m.group(1).strip()
    for key in ("Connection refused", "Name or service not known", "timed out",
                "No route to host", "Connection reset"):
        if key.lower() in text.lower():
            return key
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:200]
