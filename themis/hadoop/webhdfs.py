"""HDFS access of the AM, the client and the job runners: the ``hdfs`` package's WebHDFS
client (the same library as the checkpoint store of :mod:`themis.jobs.storage`) over a
:class:`~themis.identity.http.HadoopSession` (the user's name, a Kerberos ticket, or the
app's delegation token), with the few compound operations they need on top: a
replace-by-rename for the AM's state, "absent is None" reads, appends that create the
file, and one error type that names the operation, the path and the NameNode's message.

Files here are small (specs, state, the AM jar, TensorBoard event-file increments).
``hdfs`` is a base dependency of the package: the AM and the runners run in YARN
containers whose image may hold only the base package (``docker/yarn/Dockerfile``).
"""

from __future__ import annotations

import logging
import posixpath
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import hdfs
import requests

from themis.identity.http import HadoopSession, container_session, login_user, timeouts

# The hdfs package logs every call at INFO; the AM logs at INFO.
logging.getLogger("hdfs").setLevel(logging.WARNING)

T = TypeVar("T")


class WebHdfsError(RuntimeError):
    """A WebHDFS call failed (names the operation, the path and the NameNode's message);
    ``missing`` when the path does not exist."""

    def __init__(self, message: str, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


class WebHdfs:
    def __init__(self, url: str, user: str | None = None, timeout: float = 30.0,
                 session: HadoopSession | None = None) -> None:
        self.url = url.rstrip("/")
        self.session = session or HadoopSession(user=user or login_user())
        self.user = self.session.user or ""
        self.timeout = timeouts(timeout)
        self.client: Any = hdfs.Client(self.url, timeout=self.timeout, session=self.session)

    @classmethod
    def in_container(cls, url: str, env: Mapping[str, str] | None = None,
                     timeout: float = 30.0) -> WebHdfs:
        """WebHDFS as the app's user from inside its containers
        (:func:`~themis.identity.http.container_session`)."""
        return cls(url, timeout=timeout, session=container_session(env))

    def home(self) -> str:
        """The user's home directory as the NameNode names it (``GETHOMEDIRECTORY``): with
        Kerberos, the home of the ticket's principal after the cluster's auth_to_local."""
        return str(self._root_op("GETHOMEDIRECTORY", "Path"))

    def delegation_token(self, renewer: str) -> str:
        """A WebHDFS delegation token of the session's user that ``renewer`` (a principal)
        may renew, as Hadoop's URL string."""
        return str(self._root_op("GETDELEGATIONTOKEN", "Token", "urlString", renewer=renewer))

    def _root_op(self, op: str, *keys: str, **params: str) -> Any:
        """A GET operation on ``/`` that the ``hdfs`` package has no call for: the value at
        ``keys`` of its JSON answer."""
        def call() -> Any:
            r = self.session.get(f"{self.url}/webhdfs/v1/", params={"op": op, **params},
                                 timeout=self.timeout)
            if r.status_code >= 400:
                raise WebHdfsError(f"WebHDFS {op}: HTTP {r.status_code}: {r.text[:300]}")
            doc = r.json()
            for k in keys:
                doc = doc[k]
            return doc

        try:
            return self._call(op, "/", call)
        except (KeyError, TypeError, ValueError) as e:
            raise WebHdfsError(f"WebHDFS {op}: unexpected answer: {e}") from None

    def _call(self, op: str, path: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except hdfs.HdfsError as e:
            exc = getattr(e, "exception", None)
            raise WebHdfsError(f"WebHDFS {op} {path}: {e}" + (f" ({exc})" if exc else ""),
                               missing=exc == "FileNotFoundException") from None
        except requests.RequestException as e:
            raise WebHdfsError(f"WebHDFS {op} {path}: {self.url} unreachable: {e}") from None

    def mkdirs(self, path: str, permission: str | None = None) -> None:
        """Create ``path`` and its parents; ``permission`` (octal, e.g. "700") applies to
        the directories this call creates."""
        self._call("MKDIRS", path, lambda: self.client.makedirs(path, permission=permission))

    def chmod(self, path: str, permission: str) -> None:
        self._call("SETPERMISSION", path,
                   lambda: self.client.set_permission(path, permission=permission))

    def status(self, path: str) -> dict[str, Any] | None:
        """The FileStatus of ``path``, None if it does not exist."""
        try:
            return dict(self._call("GETFILESTATUS", path, lambda: self.client.status(path)))
        except WebHdfsError as e:
            if e.missing:
                return None
            raise

    def write(self, path: str, data: bytes, overwrite: bool = True,
              permission: str | None = None) -> None:
        self._call("CREATE", path, lambda: self.client.write(
            path, data, overwrite=overwrite, permission=permission))

    def append(self, path: str, data: bytes) -> None:
        """Append ``data`` to ``path``, creating the file if it does not exist."""
        if not data:
            return
        try:
            self._call("APPEND", path, lambda: self.client.write(path, data, append=True))
        except WebHdfsError as e:
            if not e.missing:
                raise
            self.write(path, data, overwrite=False)

    def files_under(self, root: str) -> list[tuple[str, dict[str, Any]]]:
        """Every file below directory ``root`` (recursively): (path relative to ``root``,
        FileStatus), in walk order; empty when ``root`` does not exist."""
        def walk() -> list[tuple[str, dict[str, Any]]]:
            top = self.client.resolve(root)
            out = []
            for (path, _), _, files in self.client.walk(top, status=True, ignore_missing=True):
                out += [(posixpath.relpath(posixpath.join(path, name), top), dict(st))
                        for name, st in files]
            return out

        try:
            return self._call("LISTSTATUS", root, walk)
        except WebHdfsError as e:
            if e.missing:
                return []
            raise

    def read(self, path: str) -> bytes:
        def fetch() -> bytes:
            with self.client.read(path) as r:
                return bytes(r.read())

        return self._call("OPEN", path, fetch)

    def read_or_none(self, path: str) -> bytes | None:
        try:
            return self.read(path)
        except WebHdfsError as e:
            if e.missing:
                return None
            raise

    def rename(self, src: str, dst: str) -> bool:
        try:
            self._call("RENAME", src, lambda: self.client.rename(src, dst))
        except WebHdfsError as e:
            if "Unable to rename" in str(e):
                return False
            raise
        return True

    def rename_over(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``, replacing the file ``dst`` if there is one: WebHDFS
        RENAME with ``renameoptions=OVERWRITE`` (Hadoop's ``rename2``, one NameNode
        operation; ``dst``'s parent must exist). It replaces a file whose write was cut
        too, whose lease a writer that is gone still holds: an overwriting CREATE of that
        file is refused (``AlreadyBeingCreatedException``) until the NameNode recovers the
        lease, 60 s or more after the cut."""
        self._call("RENAME", src, lambda: self.client._rename(
            src, destination=self.client.resolve(dst), renameoptions="OVERWRITE"))

    def delete(self, path: str, recursive: bool = False) -> bool:
        return bool(self._call("DELETE", path,
                               lambda: self.client.delete(path, recursive=recursive)))

    def write_atomic(self, path: str, data: bytes) -> None:
        """Write a sibling temp file of a name of its own, then rename it over ``path``
        (:meth:`rename_over`): ``path`` is the old content or the new, never missing or
        partial. A write cut by an HDFS fault leaves only its temp file, whose lease blocks
        no later write (a fixed temp name would refuse every write until the NameNode
        recovered that lease, 60 s or more)."""
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
        self.write(tmp, data, overwrite=False)
        self.rename_over(tmp, path)

    def read_latest(self, path: str) -> bytes | None:
        """``path``, else the temp file of an interrupted write of an older version, which
        deleted ``path`` before renaming ``path.tmp`` to it (:meth:`write_atomic` now
        replaces ``path`` in one rename)."""
        data = self.read_or_none(path)
        return data if data is not None else self.read_or_none(f"{path}.tmp")
