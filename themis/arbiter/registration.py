"""Who may register an app with the arbiter (docs/yarn.md, "Security").

``RegisterApp`` carries a registration token that proves the caller is the app's
application master; the arbiter core asks its :class:`Registrar` before it changes anything.

* :class:`HmacRegistrar`: the token is HMAC-SHA256(key, app id) with a key that only the
  arbiter and whoever hands out tokens know (standalone mode: the driver, which gives each of
  its application masters its own token; tests).
* Under YARN the token is the AM's AMRMToken, checked by the ResourceManager
  (:class:`themis.yarn.auth.AmRmTokenRegistrar`): only the RM and the AM's container hold it.

A registrar raises :class:`~themis.arbiter.errors.CallError` with PERMISSION_DENIED naming the
reason (missing, malformed, wrong, another app's, an app that has ended).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Protocol

from themis.arbiter.errors import CallError, Code

#: characters of a registration token; a longer one is refused without being looked at (an
#: AMRMToken in Hadoop's URL-safe encoding is ~150 characters)
MAX_TOKEN = 4096


class Registrar(Protocol):
    def check(self, app_id: str, token: str) -> None:
        """Return if ``token`` proves the caller is ``app_id``'s application master, else
        raise CallError(PERMISSION_DENIED)."""
        ...


def check_shape(app_id: str, token: str) -> None:
    """The checks every registrar makes first: a token is present and not oversized."""
    if not token:
        raise CallError(Code.PERMISSION_DENIED,
                        f"app {app_id!r}: missing registration token (registration_token)")
    if len(token) > MAX_TOKEN:
        raise CallError(Code.PERMISSION_DENIED,
                        f"app {app_id!r}: registration token of {len(token)} characters "
                        f"(at most {MAX_TOKEN})")


class HmacRegistrar:
    """Tokens HMAC-SHA256(key, app id), hex; a fresh random 256-bit key by default."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else secrets.token_bytes(32)
        if len(self._key) < 16:
            raise ValueError("registration key: at least 16 bytes")

    def token_for(self, app_id: str) -> str:
        return hmac.new(self._key, app_id.encode(), hashlib.sha256).hexdigest()

    def check(self, app_id: str, token: str) -> None:
        check_shape(app_id, token)
        if not hmac.compare_digest(self.token_for(app_id).encode(), token.encode()):
            raise CallError(Code.PERMISSION_DENIED,
                            f"app {app_id!r}: wrong registration token")
