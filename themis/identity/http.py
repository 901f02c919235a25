"""Who Themis is towards a cluster's web endpoints (the RM REST API, WebHDFS, ``/conf``):
one ``requests`` session per identity, for every client of those endpoints.

* **Pseudo ("simple") authentication**: every request names the user (``user.name=``),
  by default the login name (``$HADOOP_USER_NAME`` overrides it), never ``root``.
* **Kerberos (SPNEGO)**: an endpoint that answers 401 with ``WWW-Authenticate: Negotiate``
  is asked again with a Kerberos ticket from the user's cache (``kinit``), through the
  ``requests-gssapi`` library (the ``kerberos`` extra); from then on that origin gets no
  ``user.name=``: the ticket says who the user is, and the NameNode refuses a ``user.name``
  that differs from it. Hadoop's ``hadoop.auth`` cookie keeps later requests cheap.
* **Delegation token**: inside the app's containers there is no ticket, only the tokens the
  submission carried (:mod:`themis.identity.tokens`); WebHDFS takes them as ``delegation=``.

No ticket, an expired one, or a cluster that asks for Kerberos where ``requests-gssapi`` is
not installed: :class:`AuthError`, one line that says what to do (``run kinit``). The
commands print it and exit 2 (docs/install.md, "Security and Kerberos").
"""

from __future__ import annotations

import getpass
import logging
import os
import urllib.parse
from collections.abc import Mapping
from typing import Any

import requests

from themis.identity.tokens import container_tokens, webhdfs_token

USER_ENV = "HADOOP_USER_NAME"

#: seconds to open a connection to the NameNode or a DataNode: a host that is gone or cut
#: off (SYNs dropped) costs a call this long, not the whole read timeout; 5 s leaves room
#: for the two SYN retransmissions of a loaded host (at 1 s and 3 s)
CONNECT_TIMEOUT_S = 5.0


def timeouts(read_s: float) -> tuple[float, float]:
    """``requests``' (connect, read) timeouts for a read timeout of ``read_s``."""
    return min(CONNECT_TIMEOUT_S, read_s), read_s


# requests-gssapi logs a failed exchange with its traceback at ERROR; AuthError says it once
logging.getLogger("requests_gssapi").setLevel(logging.CRITICAL)


class AuthError(RuntimeError):
    """The cluster wants credentials this process does not have (one line: what to do)."""


def login_user(env: Mapping[str, str] | None = None) -> str:
    """The user of pseudo authentication: ``$HADOOP_USER_NAME``, else the login name."""
    env = os.environ if env is None else env
    return env.get(USER_ENV) or getpass.getuser()


def container_session(env: Mapping[str, str] | None = None) -> HadoopSession:
    """The app's user from inside its containers: the app's delegation token when YARN gave
    the container one (a secure cluster), else the submitting user's name
    (``$HADOOP_USER_NAME``, set by ``themis submit``; else the login name)."""
    env = os.environ if env is None else env
    return HadoopSession(user=login_user(env), delegation=webhdfs_token(container_tokens(env)))


def negotiates(r: requests.Response) -> bool:
    return r.status_code == 401 and "negotiate" in r.headers.get("WWW-Authenticate", "").lower()


def _origin(url: str) -> str:
    p = urllib.parse.urlsplit(url)
    return f"{p.scheme}://{p.netloc}".lower()


def kerberos_principal() -> str | None:
    """The principal of the user's default ticket cache (``alice@REALM``), None without a
    valid ticket or without the ``kerberos`` extra."""
    try:
        import gssapi
    except ImportError:
        return None
    try:
        creds = gssapi.Credentials(usage="initiate")
        if creds.lifetime is not None and creds.lifetime <= 0:
            return None
        return str(creds.name)
    except Exception:  # gssapi's GSSError: no cache, no default principal, expired
        return None


class HadoopSession(requests.Session):
    """A session whose requests carry one identity: ``user`` (pseudo auth) until an origin
    asks for SPNEGO, or ``delegation`` (a WebHDFS token string) on every request."""

    def __init__(self, user: str | None = None, delegation: str | None = None) -> None:
        super().__init__()
        self.user = user
        self.delegation = delegation
        self._kerberos: set[str] = set()  # origins that asked for SPNEGO
        self._spnego: Any = None

    def uses_kerberos(self, url: str) -> bool:
        return _origin(url) in self._kerberos

    def _params(self, url: str, params: Any) -> dict[str, Any]:
        out = dict(params or {})
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        if self.delegation:
            if "delegation" not in query:
                out.setdefault("delegation", self.delegation)
        elif (self.user and "user.name" not in query and "delegation" not in query
              and _origin(url) not in self._kerberos):
            out.setdefault("user.name", self.user)
        return out

    def request(self, method: str | bytes, url: str | bytes,  # type: ignore[override]
                **kwargs: Any) -> requests.Response:
        """As ``requests.Session.request`` (keyword arguments only), with this identity."""
        m = method.decode() if isinstance(method, bytes) else method
        u = url.decode() if isinstance(url, bytes) else url
        kwargs["params"] = self._params(u, kwargs.get("params"))
        r = super().request(m, u, **kwargs)
        if self.delegation or not negotiates(r) or kwargs.get("auth") is not None:
            return r
        self._kerberos.add(_origin(u))
        kwargs["params"].pop("user.name", None)
        kwargs["auth"] = self._negotiator(u)
        try:
            r = super().request(m, u, **kwargs)
        except requests.RequestException as e:
            if _is_spnego_failure(e):
                raise no_ticket(u, e) from None
            raise
        if negotiates(r):
            path = urllib.parse.urlsplit(u).path
            raise no_ticket(u, RuntimeError(f"HTTP 401 for {m} {path}"))
        return r

    def _negotiator(self, url: str) -> Any:
        if self._spnego is None:
            try:
                from requests_gssapi import HTTPSPNEGOAuth
            except ImportError:
                raise AuthError(
                    f"{_origin(url)} asks for Kerberos (SPNEGO) and this Python has no "
                    "requests-gssapi: pip install 'themis-yarn[kerberos]'") from None
            self._spnego = HTTPSPNEGOAuth(opportunistic_auth=False)
        return self._spnego


def no_ticket(url: str, err: BaseException) -> AuthError:
    """The one-line error for a failed SPNEGO exchange (no ticket, or an expired one)."""
    who = kerberos_principal()
    why = (f"the Kerberos ticket of {who} was refused" if who
           else "no valid Kerberos ticket in the credentials cache")
    detail = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
    return AuthError(f"{_origin(url)} needs Kerberos and {why} ({detail}): run kinit")


def _is_spnego_failure(e: BaseException) -> bool:
    try:
        from requests_gssapi.exceptions import SPNEGOExchangeError
    except ImportError:
        return False
    return isinstance(e, SPNEGOExchangeError)
