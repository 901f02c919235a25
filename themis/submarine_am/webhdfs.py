"""A minimal WebHDFS client (urllib only) for the AM and the client: files are small
(specs, state, the AM jar). Checkpoints go through :mod:`themis.jobs.storage`."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class WebHdfsError(RuntimeError):
    """A WebHDFS call failed (names the operation, the path and the NameNode's message)."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class WebHdfs:
    def __init__(self, url: str, user: str = "root", timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.user = user
        self.timeout = timeout
        self._noredirect = urllib.request.build_opener(_NoRedirect)

    def _u(self, path: str, op: str, **params: Any) -> str:
        q = {"op": op, "user.name": self.user, **{k: str(v) for k, v in params.items()}}
        return f"{self.url}/webhdfs/v1{urllib.parse.quote(path)}?{urllib.parse.urlencode(q)}"

    def _call(self, method: str, path: str, op: str, data: bytes | None = None,
              **params: Any) -> Any:
        req = urllib.request.Request(self._u(path, op, **params), data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise WebHdfsError(f"WebHDFS {op} {path}: HTTP {e.code}: {_message(e)}") from None
        except OSError as e:
            raise WebHdfsError(f"WebHDFS {op} {path}: {e}") from None
        return json.loads(raw) if raw and op != "OPEN" else raw

    def mkdirs(self, path: str) -> None:
        self._call("PUT", path, "MKDIRS")

    def status(self, path: str) -> dict[str, Any] | None:
        try:
            return dict(self._call("GET", path, "GETFILESTATUS")["FileStatus"])
        except WebHdfsError as e:
            if "HTTP 404" in str(e):
                return None
            raise

    def list(self, path: str) -> list[dict[str, Any]]:
        return list(self._call("GET", path, "LISTSTATUS")["FileStatuses"]["FileStatus"])

    def write(self, path: str, data: bytes, overwrite: bool = True) -> None:
        """Two-step create: the NameNode redirects (307) to a DataNode."""
        req = urllib.request.Request(self._u(path, "CREATE", overwrite=str(overwrite).lower()),
                                     method="PUT", data=b"")
        try:
            self._noredirect.open(req, timeout=self.timeout)
            raise WebHdfsError(f"WebHDFS CREATE {path}: no redirect to a DataNode")
        except urllib.error.HTTPError as e:
            if e.code != 307:
                raise WebHdfsError(f"WebHDFS CREATE {path}: HTTP {e.code}: {_message(e)}") from None
            location = e.headers["Location"]
        except OSError as e:
            raise WebHdfsError(f"WebHDFS CREATE {path}: {e}") from None
        put = urllib.request.Request(location, data=data, method="PUT",
                                     headers={"Content-Type": "application/octet-stream"})
        try:
            with urllib.request.urlopen(put, timeout=self.timeout) as r:
                r.read()
        except urllib.error.HTTPError as e:
            raise WebHdfsError(f"WebHDFS CREATE {path}: HTTP {e.code}: {_message(e)}") from None
        except OSError as e:
            raise WebHdfsError(f"WebHDFS CREATE {path}: {e}") from None

    def read(self, path: str) -> bytes:
        out = self._call("GET", path, "OPEN")
        assert isinstance(out, bytes)
        return out

    def read_or_none(self, path: str) -> bytes | None:
        try:
            return self.read(path)
        except WebHdfsError as e:
            if "HTTP 404" in str(e):
                return None
            raise

    def rename(self, src: str, dst: str) -> bool:
        return bool(self._call("PUT", src, "RENAME", destination=dst)["boolean"])

    def delete(self, path: str, recursive: bool = False) -> bool:
        return bool(self._call("DELETE", path, "DELETE",
                               recursive=str(recursive).lower())["boolean"])

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


def _message(e: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(e.read() or b"{}")
        return str(body.get("RemoteException", {}).get("message", "")) or e.reason
    except (ValueError, OSError):
        return str(e.reason)
