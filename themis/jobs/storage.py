"""Where checkpoints live: a local directory or HDFS through WebHDFS.

A checkpoint is a small directory of files. A :class:`CheckpointStore` publishes such a
directory *atomically* under a name: the files are first written under a temporary name
(``.tmp-<name>-<random>``) and then renamed, so a reader never sees half a checkpoint
under a final name. A writer killed mid-upload leaves a ``.tmp-*`` entry behind, which
readers ignore (and report; nothing is deleted behind the user's back). Deletion is atomic
in the same way: a local entry is first renamed ``.deleting-<name>-<random>`` and then
removed, so a writer killed in the middle of a deletion leaves that entry behind (removed
by the next retention pass, :meth:`~themis.jobs.checkpoints.CheckpointManager.save`), never
half a checkpoint under its final name; an HDFS delete is one NameNode operation.

URIs understood by :func:`open_store`:

* ``/abs/path``, ``rel/path`` or ``file:///abs/path``: a local directory;
* ``webhdfs://host:port/path``: WebHDFS REST endpoint ``http://host:port``;
* ``hdfs://host[:rpc-port]/path``: the same HDFS path, reached through WebHDFS at
  ``$THEMIS_WEBHDFS_URL`` if set, else ``http://host:9870`` (the Hadoop 3 NameNode HTTP
  port). The RPC port is ignored: Python cannot speak Hadoop RPC.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shutil
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

LOG = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-"
DELETING_PREFIX = ".deleting-"
DEFAULT_WEBHDFS_PORT = 9870


class StorageError(RuntimeError):
    """A checkpoint store operation failed (names the store, the entry and the cause)."""


class CheckpointStore(ABC):
    """A flat namespace of checkpoint directories."""

    @property
    @abstractmethod
    def description(self) -> str:
        """Human-readable location, for logs and error messages."""

    @abstractmethod
    def list_names(self) -> list[str]:
        """Names of the entries directly under the store root (including ``.tmp-*``)."""

    @abstractmethod
    def put_dir(self, local_dir: Path, name: str) -> None:
        """Publish the files of ``local_dir`` as entry ``name`` atomically.

        Raises :class:`StorageError` if ``name`` already exists or the upload fails."""

    @abstractmethod
    def get_dir(self, name: str, local_dir: Path) -> None:
        """Copy entry ``name`` into ``local_dir`` (which must not exist yet)."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Remove entry ``name`` and its files; ``name`` disappears in one step (an
        interrupted delete leaves a ``.deleting-*`` entry, never a partial ``name``)."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Rename entry ``src`` to ``dst`` (which must not exist)."""


def _check_name(name: str) -> None:
    if not name or "/" in name or name in (".", ".."):
        raise StorageError(f"invalid checkpoint entry name {name!r}")


class LocalDirStore(CheckpointStore):
    """Checkpoints in a local directory; publication is an ``os.rename`` of a directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot create checkpoint directory {self.root}: {e}") from e

    @property
    def description(self) -> str:
        return f"local directory {self.root}"

    def list_names(self) -> list[str]:
        try:
            return sorted(p.name for p in self.root.iterdir() if p.is_dir())
        except OSError as e:
            raise StorageError(f"cannot list {self.description}: {e}") from e

    def put_dir(self, local_dir: Path, name: str) -> None:
        _check_name(name)
        final = self.root / name
        if final.exists():
            raise StorageError(f"{self.description}: entry {name!r} already exists")
        tmp = self.root / f"{TMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
        try:
            shutil.copytree(local_dir, tmp)
            for f in tmp.iterdir():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
            os.rename(tmp, final)
            dir_fd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as e:
            raise StorageError(f"{self.description}: cannot publish {name!r}: {e}") from e

    def get_dir(self, name: str, local_dir: Path) -> None:
        _check_name(name)
        try:
            shutil.copytree(self.root / name, local_dir)
        except OSError as e:
            raise StorageError(f"{self.description}: cannot read {name!r}: {e}") from e

    def delete(self, name: str) -> None:
        _check_name(name)
        try:
            if name.startswith(DELETING_PREFIX):  # finishing an interrupted deletion
                shutil.rmtree(self.root / name)
                return
            # rename first: a SIGKILL during the rmtree must not leave a partial entry
            # under a checkpoint's name (it would fail verification, or be restored)
            aside = self.root / f"{DELETING_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
            os.rename(self.root / name, aside)
            shutil.rmtree(aside)
        except OSError as e:
            raise StorageError(f"{self.description}: cannot delete {name!r}: {e}") from e

    def rename(self, src: str, dst: str) -> None:
        _check_name(src)
        _check_name(dst)
        if (self.root / dst).exists():
            raise StorageError(f"{self.description}: cannot rename {src!r}: {dst!r} exists")
        try:
            os.rename(self.root / src, self.root / dst)
        except OSError as e:
            raise StorageError(f"{self.description}: cannot rename {src!r}: {e}") from e


class WebHdfsStore(CheckpointStore):
    """Checkpoints in HDFS through the WebHDFS REST API (the ``hdfs`` PyPI package, the
    HDFS client of the whole project: :mod:`themis.hadoop.webhdfs` adapts the same).

    Publication uploads to a temporary directory and then issues one HDFS rename, which
    is atomic on the NameNode."""

    def __init__(self, http_url: str, root: str, user: str | None = None) -> None:
        from hdfs import Client  # imported lazily: only needed for HDFS stores

        from themis.identity.http import HadoopSession, container_session, timeouts

        self.http_url = http_url.rstrip("/")
        self.root = root.rstrip("/") or "/"
        # as the app's user: the container's delegation token on a secure cluster, else
        # the user's name
        session = HadoopSession(user=user) if user else container_session()
        self.user = session.user or ""
        # timeouts: without them a NameNode that stops answering would hang the checkpoint
        # a job writes when it is told to stop; a host that is gone costs the connect one
        self._client: Any = Client(self.http_url, timeout=timeouts(60.0), session=session)
        try:
            self._client.makedirs(self.root)
        except Exception as e:
            raise StorageError(f"{self.description}: cannot create root: {e}") from e

    @property
    def description(self) -> str:
        return f"WebHDFS {self.http_url}{self.root} (user {self.user})"

    def _path(self, name: str) -> str:
        _check_name(name)
        return posixpath.join(self.root, name)

    def list_names(self) -> list[str]:
        try:
            entries = self._client.list(self.root, status=True)
        except Exception as e:
            raise StorageError(f"cannot list {self.description}: {e}") from e
        return sorted(n for n, st in entries if st.get("type") == "DIRECTORY")

    def put_dir(self, local_dir: Path, name: str) -> None:
        final = self._path(name)
        tmp = self._path(f"{TMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}")
        try:
            if self._client.status(final, strict=False) is not None:
                raise StorageError(f"{self.description}: entry {name!r} already exists")
            self._client.makedirs(tmp)
            for f in sorted(Path(local_dir).iterdir()):
                self._client.upload(posixpath.join(tmp, f.name), str(f), overwrite=True)
            self._client.rename(tmp, final)
        except StorageError:
            raise
        except Exception as e:
            raise StorageError(f"{self.description}: cannot publish {name!r}: {e}") from e

    def get_dir(self, name: str, local_dir: Path) -> None:
        src = self._path(name)
        try:
            Path(local_dir).mkdir(parents=True)
            for fname in self._client.list(src):
                self._client.download(posixpath.join(src, fname), str(Path(local_dir) / fname))
        except Exception as e:
            raise StorageError(f"{self.description}: cannot read {name!r}: {e}") from e

    def delete(self, name: str) -> None:
        try:
            self._client.delete(self._path(name), recursive=True)
        except Exception as e:
            raise StorageError(f"{self.description}: cannot delete {name!r}: {e}") from e

    def rename(self, src: str, dst: str) -> None:
        try:
            if self._client.status(self._path(dst), strict=False) is not None:
                raise StorageError(f"{self.description}: cannot rename {src!r}: {dst!r} exists")
            self._client.rename(self._path(src), self._path(dst))
        except StorageError:
            raise
        except Exception as e:
            raise StorageError(f"{self.description}: cannot rename {src!r}: {e}") from e


def open_store(uri: str, user: str | None = None) -> CheckpointStore:
    """Open the store for ``uri`` (see the module docstring for the accepted forms)."""
    if not uri:
        raise StorageError("empty checkpoint URI")
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file"):
        return LocalDirStore(Path(parsed.path if scheme == "file" else uri))
    if scheme == "webhdfs":
        if not parsed.hostname:
            raise StorageError(f"checkpoint URI {uri!r}: missing host (webhdfs://host:port/path)")
        port = parsed.port or DEFAULT_WEBHDFS_PORT
        return WebHdfsStore(f"http://{parsed.hostname}:{port}", parsed.path or "/", user)
    if scheme == "hdfs":
        http = os.environ.get("THEMIS_WEBHDFS_URL")
        if not http:
            if not parsed.hostname:
                raise StorageError(
                    f"checkpoint URI {uri!r}: no host and THEMIS_WEBHDFS_URL is not set"
                )
            http = f"http://{parsed.hostname}:{DEFAULT_WEBHDFS_PORT}"
        return WebHdfsStore(http, parsed.path or "/", user)
    raise StorageError(
        f"checkpoint URI {uri!r}: unsupported scheme {scheme!r} (use a path, file://, "
        "webhdfs:// or hdfs://)"
    )
