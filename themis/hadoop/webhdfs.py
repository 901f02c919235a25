"""HDFS access of the AM, the client and the job runners: the ``hdfs`` package's WebHDFS
client (``hdfs.InsecureClient``, the same library as the checkpoint store of
:mod:`themis.jobs.storage`), with the few compound operations they need on top: a
replace-by-rename for the AM's state, "absent is None" reads, appends that create the
file, and one error type that names the operation, the path and the NameNode's message.

Files here are small (specs, state, the AM jar, TensorBoard event-file increments).
``hdfs`` is a base dependency of the package: the AM and the runners run in YARN
containers whose image may hold only the base package (``docker/yarn/Dockerfile``).
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable
from typing import Any, TypeVar

import hdfs
import requests

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
    def __init__(self, url: str, user: str = "root", timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.user = user
        self.client: Any = hdfs.InsecureClient(self.url, user=user, timeout=timeout)

    def _call(self, op: str, path: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except hdfs.HdfsError as e:
            exc = getattr(e, "exception", None)
            raise WebHdfsError(f"WebHDFS {op} {path}: {e}" + (f" ({exc})" if exc else ""),
                               missing=exc == "FileNotFoundException") from None
        except requests.RequestException as e:
            raise WebHdfsError(f"WebHDFS {op} {path}: {self.url} unreachable: {e}") from None

    def mkdirs(self, path: str) -> None:
        self._call("MKDIRS", path, lambda: self.client.makedirs(path))

    def status(self, path: str) -> dict[str, Any] | None:
        """The FileStatus of ``path``, None if it does not exist."""
        try:
            return dict(self._call("GETFILESTATUS", path, lambda: self.client.status(path)))
        except WebHdfsError as e:
            if e.missing:
                return None
            raise

    def write(self, path: str, data: bytes, overwrite: bool = True) -> None:
        self._call("CREATE", path, lambda: self.client.write(path, data, overwrite=overwrite))

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

    def delete(self, path: str, recursive: bool = False) -> bool:
        return bool(self._call("DELETE", path,
                               lambda: self.client.delete(path, recursive=recursive)))

    def write_atomic(self, path: str, data: bytes) -> None:
        """Write a sibling temp file, then replace ``path`` with it (rename)."""
        tmp = f"{path}.tmp"
        self.write(tmp, data)
        self.delete(path)
        if not self.rename(tmp, path):
            raise WebHdfsError(f"WebHDFS RENAME {tmp} -> {path} failed")

    def read_latest(self, path: str) -> bytes | None:
        """``path``, else its temp file from an interrupted :meth:`write_atomic`."""
        data = self.read_or_none(path)
        return data if data is not None else self.read_or_none(f"{path}.tmp")
