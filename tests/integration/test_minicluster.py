"""The dockerised mini-cluster: NameNode, DataNode, ResourceManager and three NodeManagers
(yarn.io/gpu 4/2/2 on two racks), each a host with its own address on the mini-cluster's
Docker network (172.31.0.0/24).

Start-up and helpers: tests/integration/minicluster.py (testcontainers, the bridge network
themis-mc-net; images from docker/build.sh, built when missing). See docs/minicluster.md.

Skips only when no Docker daemon can be reached, even after scripts/docker-setup.sh.
Environment:
  THEMIS_IT_BUILD=0     do not run docker/build.sh when images are missing (skip instead)
  THEMIS_IMAGE, THEMIS_NM_IMAGE   images to use (defaults as docker/minicluster.sh)
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.minicluster import (
    ADDR,
    NMS,
    NN,
    RM,
    _get,
    _nodes,
    address_of,
    hosts,
    running_minicluster,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker]


@pytest.fixture(scope="module")
def minicluster() -> Iterator[dict[str, Any]]:
    with running_minicluster("it") as c:
        yield c


# ----------------------------------------------------------------------------------- tests
def test_three_nodemanagers_with_gpus_on_two_racks(minicluster: dict[str, Any]) -> None:
    nodes = _nodes()
    assert set(nodes) == set(NMS), nodes
    for name, (gpus, rack) in NMS.items():
        n = nodes[name]
        assert n["state"] == "RUNNING", n
        assert n["gpus"] == gpus, n
        assert n["rack"] == rack, n
    # NodeId = host name:port, each NM a host with its own address
    assert {n["id"] for n in nodes.values()} == {"nm1:8041", "nm2:8141", "nm3:8241"}
    box = hosts(minicluster)
    assert {h: address_of(c) for h, c in box.items()} == ADDR
    assert len({n["rack"] for n in nodes.values()}) == 2
    assert sum(n["gpus"] for n in nodes.values()) == 8


def test_webhdfs_write_then_read(minicluster: dict[str, Any]) -> None:
    path = f"/themis-it/hello-{os.getpid()}.txt"
    payload = f"themis mini-cluster {time.time()}\n".encode()
    # two-step create: the NameNode answers 307 with the DataNode's URL (its address, :9864)
    req = urllib.request.Request(
        f"{NN}/webhdfs/v1{path}?op=CREATE&overwrite=true&user.name=root", method="PUT"
    )
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        opener.open(req, timeout=10)
        raise AssertionError("expected a 307 redirect from the NameNode")
    except urllib.error.HTTPError as e:
        assert e.code == 307, e
        location = e.headers["Location"]
    assert location.startswith(f"http://{ADDR['dn']}:9864/"), location
    put = urllib.request.Request(location, data=payload, method="PUT")
    with urllib.request.urlopen(put, timeout=30) as r:
        assert r.status == 201
    with urllib.request.urlopen(f"{NN}/webhdfs/v1{path}?op=OPEN&user.name=root", timeout=30) as r:
        assert r.read() == payload
    st = _get(f"{NN}/webhdfs/v1{path}?op=GETFILESTATUS&user.name=root")["FileStatus"]
    assert st["length"] == len(payload)
    req = urllib.request.Request(
        f"{NN}/webhdfs/v1/themis-it?op=DELETE&recursive=true&user.name=root", method="DELETE"
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.load(r)["boolean"] is True


def test_rm_launches_an_am_container_on_an_nm(minicluster: dict[str, Any]) -> None:
    """The RM reaches the NMs by host name (nm1:8041, ...) to launch an AM container. The command is
    not a real AM (it never registers), so the attempt ends, but only after it ran (exit 0)."""
    app_id = _post(f"{RM}/ws/v1/cluster/apps/new-application", None)["application-id"]
    spec = {
        "application-id": app_id,
        "application-name": "themis-it-smoke",
        "application-type": "YARN",
        "queue": "default",
        "max-app-attempts": 1,
        "am-container-spec": {"commands": {"command": "echo hello > <LOG_DIR>/hello.txt"}},
        "resource": {"memory": 256, "vCores": 1},
    }
    _post(f"{RM}/ws/v1/cluster/apps?user.name=root", spec, expect=202)
    deadline = time.monotonic() + 90
    app: dict[str, Any] = {}
    while time.monotonic() < deadline:
        app = _get(f"{RM}/ws/v1/cluster/apps/{app_id}")["app"]
        if app["state"] in ("FINISHED", "FAILED", "KILLED"):
            break
        time.sleep(1)
    assert app.get("state") in ("FINISHED", "FAILED"), app
    assert (app.get("amHostHttpAddress") or "").split(":")[0] in NMS, app
    assert "exitCode: 0" in app.get("diagnostics", ""), app["diagnostics"]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _post(url: str, body: Any, expect: int | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=15) as r:
        if expect is not None:
            assert r.status == expect, r.status
        raw = r.read()
    return json.loads(raw) if raw else None
