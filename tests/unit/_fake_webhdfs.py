"""An in-memory WebHDFS (NameNode + DataNode on one loopback port) for unit tests.

It answers the REST calls the ``hdfs`` package makes, the way Hadoop 3 does: CREATE and
APPEND are two-step (the "NameNode" answers 307 with a ``Location`` on the "DataNode"),
errors are ``RemoteException`` JSON bodies with Hadoop's exception names. ``fail_appends``
makes the next N APPENDs fail as a lease conflict does (``AlreadyBeingCreatedException``).
``cut_writes`` cuts the next N CREATE data transfers (a DataNode lost mid-write): as in
HDFS, the file has been replaced by the part written, and its lease, held by the writer
that is gone (``leased``), has every CREATE or APPEND of that file refused with
``AlreadyBeingCreatedException`` (until the NameNode recovers the lease, which the fake
never does); a DELETE, or a RENAME with ``renameoptions=OVERWRITE`` over it, takes it.
"""

from __future__ import annotations

import json
import posixpath
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlparse

PREFIX = "/webhdfs/v1"


class FakeWebHdfs:
    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {}
        self.dirs: set[str] = {"/"}
        self.ops: list[tuple[str, str]] = []  # (op, path) as the NameNode saw them
        self.placed: list[str] = []  # paths whose content a CREATE or RENAME set, in order
        self.bytes_received = 0
        self.fail_appends = 0
        self.cut_writes = 0
        self.leased: set[str] = set()  # files whose write was cut (module docstring)
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                fake._serve(self)

            do_GET = do_PUT = do_POST = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------ helpers
    def _status(self, path: str) -> dict[str, Any] | None:
        if path in self.files:
            return {"type": "FILE", "length": len(self.files[path]), "pathSuffix": "",
                    "modificationTime": int(time.time() * 1000)}
        if path in self.dirs:
            return {"type": "DIRECTORY", "length": 0, "pathSuffix": "",
                    "modificationTime": int(time.time() * 1000)}
        return None

    def _mkdirs(self, path: str) -> None:
        while path not in ("/", ""):
            self.dirs.add(path)
            path = posixpath.dirname(path)

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        u = urlparse(h.path)
        path = posixpath.normpath(unquote(u.path[len(PREFIX):]) or "/")
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        op = q.get("op", "")
        body = self._body(h)
        with self.lock:
            code, doc, headers, raw = self._op(h.command, op, path, q, body)
        h.send_response(code)
        for k, v in headers.items():
            h.send_header(k, v)
        data = raw if raw is not None else (json.dumps(doc).encode() if doc is not None else b"")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    @staticmethod
    def _body(h: BaseHTTPRequestHandler) -> bytes:
        if h.headers.get("Transfer-Encoding", "").lower() != "chunked":
            return h.rfile.read(int(h.headers.get("Content-Length") or 0))
        out = b""  # a streamed upload (the hdfs package sends generators chunked)
        while True:
            size = int(h.rfile.readline().split(b";")[0], 16)
            chunk = h.rfile.read(size + 2)[:size]  # + CRLF
            if size == 0:
                return out
            out += chunk

    def _error(self, code: int, exception: str, message: str) -> tuple[int, Any, dict[str, str], None]:
        return code, {"RemoteException": {"exception": exception, "message": message,
                                          "javaClassName": f"java.io.{exception}"}}, {}, None

    def _op(self, method: str, op: str, path: str, q: dict[str, str],
            body: bytes) -> tuple[int, Any, dict[str, str], bytes | None]:
        if "datanode" not in q:
            self.ops.append((op, path))
        missing = self._error(404, "FileNotFoundException", f"File does not exist: {path}")
        if op == "GETHOMEDIRECTORY":  # pseudo auth: the home of user.name (else dr.who)
            return 200, {"Path": f"/user/{q.get('user.name', 'dr.who')}"}, {}, None
        if op == "GETFILESTATUS":
            st = self._status(path)
            return (200, {"FileStatus": st}, {}, None) if st else missing
        if op == "LISTSTATUS":
            if path in self.files:
                return 200, {"FileStatuses": {"FileStatus": [self._status(path)]}}, {}, None
            if path not in self.dirs:
                return missing
            children = sorted({p for p in self.files.keys() | self.dirs
                               if p != path and posixpath.dirname(p) == path})
            out = [{**(self._status(c) or {}), "pathSuffix": posixpath.basename(c)}
                   for c in children]
            return 200, {"FileStatuses": {"FileStatus": out}}, {}, None
        if op == "MKDIRS":
            self._mkdirs(path)
            return 200, {"boolean": True}, {}, None
        if op == "OPEN":
            if path not in self.files:
                return missing
            return 200, None, {"Content-Type": "application/octet-stream"}, bytes(self.files[path])
        if op in ("CREATE", "APPEND") and "datanode" not in q:
            overwrite = q.get("overwrite", "false").lower() == "true"  # Hadoop: any case
            if op == "CREATE" and path in self.files and not overwrite:
                return self._error(403, "FileAlreadyExistsException", f"{path} already exists")
            if op == "APPEND":
                if path not in self.files:
                    return missing
                if self.fail_appends > 0:
                    self.fail_appends -= 1
                    return self._error(403, "AlreadyBeingCreatedException",
                                       f"Failed to APPEND_FILE {path}: lease held")
            loc = f"{self.url}{PREFIX}{path}?{urlencode({**q, 'datanode': 'true'})}"
            return 307, None, {"Location": loc}, None
        if op in ("CREATE", "APPEND") and path in self.leased:
            return self._error(403, "AlreadyBeingCreatedException",
                               f"Failed to {op} {path}: the lease is held by a client "
                               "that is gone, until the NameNode recovers it")
        if op == "CREATE":
            self._mkdirs(posixpath.dirname(path))
            if self.cut_writes > 0:  # the old file is gone, the new one cut short
                self.cut_writes -= 1
                self.files[path] = bytearray(body[: len(body) // 2])
                self.leased.add(path)
                return self._error(500, "IOException", f"{path}: DataNode lost mid-write")
            self.files[path] = bytearray(body)
            self.bytes_received += len(body)
            self.placed.append(path)
            return 201, None, {}, None
        if op == "APPEND":
            self.files[path] += body
            self.bytes_received += len(body)
            return 200, None, {}, None
        if op == "RENAME" and "OVERWRITE" in q.get("renameoptions", "").upper().split(","):
            dst = q["destination"]  # Hadoop's rename2: errors are exceptions, no boolean
            if path not in self.files:
                return missing
            if dst in self.dirs:
                return self._error(403, "IOException", f"{dst} is a directory")
            if posixpath.dirname(dst) not in self.dirs:
                return self._error(404, "FileNotFoundException",
                                   f"rename destination parent {posixpath.dirname(dst)} "
                                   "not found")
            self.files[dst] = self.files.pop(path)
            self.placed.append(dst)
            self.leased.discard(dst)
            if path in self.leased:
                self.leased.discard(path)
                self.leased.add(dst)
            return 200, None, {"Content-Type": "application/octet-stream"}, b""
        if op == "RENAME":
            dst = q["destination"]
            if self._status(path) is None or self._status(dst) is not None:
                return 200, {"boolean": False}, {}, None

            def moved(p: str) -> str:
                return dst + p[len(path):] if p == path or p.startswith(path + "/") else p

            self._mkdirs(posixpath.dirname(dst))
            self.placed += [moved(p) for p in self.files if moved(p) != p]
            self.files = {moved(p): data for p, data in self.files.items()}
            self.dirs = {moved(d) for d in self.dirs}
            return 200, {"boolean": True}, {}, None
        if op == "DELETE":
            gone = [p for p in self.files if p == path or p.startswith(path + "/")]
            for p in gone:
                del self.files[p]
                self.leased.discard(p)
            found = bool(gone) or path in self.dirs
            self.dirs = {d for d in self.dirs if not (d == path or d.startswith(path + "/"))}
            return 200, {"boolean": found}, {}, None
        return self._error(400, "IllegalArgumentException", f"unsupported op {op!r}")
