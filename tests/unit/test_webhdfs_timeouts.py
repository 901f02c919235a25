"""A NameNode or DataNode host that is gone or cut off (its SYNs dropped) costs a WebHDFS
call the connect timeout, not the whole read timeout (issue 35: the runner's copies and a
job's restore meet HDFS away), and a host that accepts but never answers the read one."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

import themis.identity.http as http
from themis.hadoop.webhdfs import WebHdfs, WebHdfsError
from themis.jobs.storage import StorageError, WebHdfsStore


@pytest.fixture
def unanswered_syns() -> Iterator[int]:
    """A loopback port whose accept queue is full: the kernel drops further SYNs, as for a
    host cut off by a firewall's DROP rule."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    queued = []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        queued.append(c)
    yield port
    for c in queued:
        c.close()
    srv.close()


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    for c in held:
        c.close()
    srv.close()


def test_timeouts_split_connect_from_read() -> None:
    assert http.timeouts(30.0) == (http.CONNECT_TIMEOUT_S, 30.0)
    assert http.timeouts(1.0) == (1.0, 1.0)  # never longer than the read timeout


def test_a_host_that_drops_syns_costs_the_connect_timeout(
        unanswered_syns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "CONNECT_TIMEOUT_S", 0.3)
    fs = WebHdfs(f"http://127.0.0.1:{unanswered_syns}", user="u", timeout=600.0)
    with pytest.raises(WebHdfsError, match="ConnectTimeout"):
        fs.status("/x")  # (with one timeout for both, this call would wait 600 s)


def test_a_host_that_never_answers_costs_the_read_timeout(silent_server: int) -> None:
    fs = WebHdfs(f"http://127.0.0.1:{silent_server}", user="u", timeout=0.3)
    with pytest.raises(WebHdfsError, match="Read timed out"):
        fs.status("/x")


def test_the_checkpoint_store_uses_the_connect_timeout_too(
        unanswered_syns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "CONNECT_TIMEOUT_S", 0.3)
    with pytest.raises(StorageError, match="ConnectTimeout"):
        WebHdfsStore(f"http://127.0.0.1:{unanswered_syns}", "/ckpt", user="u")
