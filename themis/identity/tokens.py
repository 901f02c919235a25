"""Hadoop delegation tokens as Python values: the URL-safe string WebHDFS and the RM REST API
hand out (``Token.encodeToUrlString``) and the credentials file YARN writes into every
container (``$HADOOP_TOKEN_FILE_LOCATION``, ``Credentials.writeTokenStorageToStream``).

The client needs them to put the user's tokens into a submission (docs/install.md, "Security
and Kerberos"): the RM REST API takes each token as a URL-safe string, and the token's
*kind* and *service* decide which Hadoop client selects it, so the client sets them
(a WebHDFS token for the localizer's ``hdfs://`` download, the RM token for the AM's
client protocol). The app's containers read the same tokens back from their credentials
file to reach WebHDFS as the user.

Written here, not taken from a library: no PyPI package reads Hadoop's Writable token
encoding or its credentials file (searched 2026-11: ``hdfs``, ``pyarrow``, ``hdfs3``,
``krb5`` and ``requests-gssapi`` all stop at SPNEGO or at a token string they pass through
unread). Both formats are small and stable (Writable since Hadoop 0.20, protobuf since 3.0).
"""

from __future__ import annotations

import base64
import binascii
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

TOKEN_FILE_ENV = "HADOOP_TOKEN_FILE_LOCATION"
WEBHDFS_KIND = "WEBHDFS delegation"
HDFS_KIND = "HDFS_DELEGATION_TOKEN"
RM_KIND = "RM_DELEGATION_TOKEN"
AMRM_KIND = "YARN_AM_RM_TOKEN"
_MAGIC = b"HDTS"
_WRITABLE, _PROTOBUF = 0, 1
MAX_FIELD = 1 << 20  # bytes: a token's identifier or password is ~100 bytes


class TokenError(ValueError):
    """A token string or credentials file that is not what Hadoop writes (says what)."""


@dataclass(frozen=True)
class Token:
    identifier: bytes
    password: bytes
    kind: str
    service: str

    def with_kind(self, kind: str, service: str) -> Token:
        """The same token (identifier and password) under another kind and service: what
        selects it for another client of the same daemon."""
        return replace(self, kind=kind, service=service)

    def to_url_string(self) -> str:
        out = io.BytesIO()
        for field in (self.identifier, self.password, self.kind.encode(),
                      self.service.encode()):
            _write_vint(out, len(field))
            out.write(field)
        return base64.urlsafe_b64encode(out.getvalue()).decode().rstrip("=")

    @classmethod
    def from_url_string(cls, text: str) -> Token:
        raw = text.strip()
        try:
            data = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        except (binascii.Error, ValueError):
            raise TokenError("a delegation token string is not URL-safe base64") from None
        r = io.BytesIO(data)
        ident, pw, kind, service = (_read_bytes(r) for _ in range(4))
        if r.read(1):
            raise TokenError("a delegation token string has bytes after its service")
        return cls(ident, pw, kind.decode(errors="replace"), service.decode(errors="replace"))


def read_credentials(path: Path) -> dict[str, Token]:
    """The tokens of a Hadoop credentials file, by alias (secret keys are skipped)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TokenError(f"credentials file {path}: {e}") from None
    if data[:4] != _MAGIC or len(data) < 5:
        raise TokenError(f"credentials file {path}: no Hadoop token storage (magic HDTS)")
    version, r = data[4], io.BytesIO(data[5:])
    try:
        if version == _WRITABLE:
            return _read_writable(r)
        if version == _PROTOBUF:
            return _read_protobuf(r)
    except TokenError as e:
        raise TokenError(f"credentials file {path}: {e}") from None
    raise TokenError(f"credentials file {path}: unknown format version {version}")


def container_tokens(env: Mapping[str, str] | None = None) -> dict[str, Token]:
    """The tokens YARN gave this container ({} outside a container or in an insecure one
    without tokens)."""
    env = os.environ if env is None else env
    path = env.get(TOKEN_FILE_ENV, "")
    return read_credentials(Path(path)) if path and Path(path).is_file() else {}


def webhdfs_token(tokens: Mapping[str, Token]) -> str | None:
    """The URL string WebHDFS takes as ``delegation=``: the app's HDFS token (either kind:
    the NameNode checks identifier and password, not the kind); None when there is none."""
    for kind in (WEBHDFS_KIND, HDFS_KIND):
        for t in tokens.values():
            if t.kind == kind:
                return t.to_url_string()
    return None


# ----------------------------------------------------------------------- Writable codec
def _write_vint(out: io.BytesIO, n: int) -> None:
    """Hadoop's ``WritableUtils.writeVLong`` (non-negative values only here)."""
    if -112 <= n <= 127:
        out.write(bytes([n & 0xFF]))
        return
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    out.write(bytes([(-112 - len(body)) & 0xFF]))
    out.write(body)


def _read_vint(r: io.BytesIO) -> int:
    first = r.read(1)
    if not first:
        raise TokenError("truncated (a length is missing)")
    b = int.from_bytes(first, "big", signed=True)
    if b >= -112:
        return b
    negative = b < -120
    size = (-120 - b) if negative else (-112 - b)
    body = r.read(size)
    if len(body) != size:
        raise TokenError("truncated (a length is cut short)")
    n = int.from_bytes(body, "big")
    return ~n if negative else n


def _read_bytes(r: io.BytesIO) -> bytes:
    n = _read_vint(r)
    if not 0 <= n <= MAX_FIELD:
        raise TokenError(f"a field of {n} bytes (at most {MAX_FIELD})")
    data = r.read(n)
    if len(data) != n:
        raise TokenError("truncated (a field is cut short)")
    return data


def _read_writable(r: io.BytesIO) -> dict[str, Token]:
    out: dict[str, Token] = {}
    for _ in range(_read_vint(r)):
        alias = _read_bytes(r).decode(errors="replace")
        ident, pw, kind, service = (_read_bytes(r) for _ in range(4))
        out[alias] = Token(ident, pw, kind.decode(errors="replace"),
                           service.decode(errors="replace"))
    return out


# ----------------------------------------------------------------------- protobuf codec
# CredentialsProto {repeated CredentialsKVProto tokens = 1; ... secrets = 2}, written with
# writeDelimitedTo; CredentialsKVProto {string alias = 1; TokenProto token = 2; ...};
# TokenProto {bytes identifier = 1; bytes password = 2; string kind = 3; string service = 4}
def _varint(r: io.BytesIO) -> int:
    n = shift = 0
    while True:
        b = r.read(1)
        if not b:
            raise TokenError("truncated protobuf varint")
        n |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return n
        shift += 7
        if shift > 63:
            raise TokenError("protobuf varint too long")


def _fields(data: bytes) -> list[tuple[int, bytes | int]]:
    r = io.BytesIO(data)
    out: list[tuple[int, bytes | int]] = []
    while r.tell() < len(data):
        key = _varint(r)
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, _varint(r)))
        elif wire == 2:
            n = _varint(r)
            value = r.read(n)
            if len(value) != n:
                raise TokenError("truncated protobuf field")
            out.append((number, value))
        else:
            raise TokenError(f"unexpected protobuf wire type {wire}")
    return out


def _read_protobuf(r: io.BytesIO) -> dict[str, Token]:
    n = _varint(r)
    body = r.read(n)
    if len(body) != n:
        raise TokenError("truncated protobuf credentials")
    out: dict[str, Token] = {}
    for number, kv in _fields(body):
        if number != 1 or not isinstance(kv, bytes):
            continue  # secrets
        alias, tok = "", b""
        for k, v in _fields(kv):
            if k == 1 and isinstance(v, bytes):
                alias = v.decode(errors="replace")
            elif k == 2 and isinstance(v, bytes):
                tok = v
        parts: dict[int, bytes] = {k: v for k, v in _fields(tok) if isinstance(v, bytes)}
        out[alias] = Token(parts.get(1, b""), parts.get(2, b""),
                           parts.get(3, b"").decode(errors="replace"),
                           parts.get(4, b"").decode(errors="replace"))
    return out
