"""The dockerised mini-cluster: NameNode, DataNode, ResourceManager and three NodeManagers
(yarn.io/gpu 4/2/2 on two racks), all with host networking on 127.0.0.1.

The containers are managed with testcontainers (DockerContainer, network_mode=host); the images
come from docker/build.sh (built here when missing). See docs/minicluster.md.

Skips only when no Docker daemon can be reached, even after scripts/docker-setup.sh.
Environment:
  THEMIS_IT_BUILD=0     do not run docker/build.sh when images are missing (skip instead)
  THEMIS_IMAGE, THEMIS_NM_IMAGE   images to use (defaults as docker/minicluster.sh)
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.docker]

# Ryuk (the reaper container) would have to be pulled from a registry: we have none.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

ROOT = Path(__file__).resolve().parents[2]
RM = "http://127.0.0.1:8088"
NN = "http://127.0.0.1:9870"
LABEL = {"themis.minicluster": "1"}
# name -> (yarn.io/gpu, rack); must match docker/conf/topology.table (the image's default table)
NMS: dict[str, tuple[int, str]] = {"nm1": (4, "/rack1"), "nm2": (2, "/rack1"), "nm3": (2, "/rack2")}
PORTS = [9000, 9870, 9866, 9864, 8088, 8030, 8031, 8032, 8033, 8041, 8141, 8241]
READY_TIMEOUT_S = 180


# ----------------------------------------------------------------------------------- helpers
def _get(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def _docker_client() -> Any:
    import docker

    return docker.from_env(timeout=60)


def skip_or_fail(why: str) -> None:
    """Skip when Docker cannot be used - unless THEMIS_REQUIRE_DOCKER=1 (scripts/test.sh's
    docker stage), where a skipped mini-cluster test would hide a broken set-up."""
    if os.environ.get("THEMIS_REQUIRE_DOCKER") == "1":
        pytest.fail(f"Docker required (THEMIS_REQUIRE_DOCKER=1) but not available: {why}")
    pytest.skip(f"Docker not available: {why}")


def _docker_available() -> tuple[bool, str]:
    try:
        _docker_client().ping()
        return True, ""
    except Exception as e:
        first = f"{type(e).__name__}: {e}"
    setup = ROOT / "scripts" / "docker-setup.sh"
    try:
        r = subprocess.run(
            ["bash", str(setup)],
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
    except Exception as e:
        return False, f"docker unreachable ({first}); docker-setup.sh could not run: {e}"
    try:
        _docker_client().ping()
        return True, ""
    except Exception as e:
        lines = (r.stderr or "").strip().splitlines()
        tail = [ln for ln in lines if ln.startswith("[docker-setup]")][-3:] or lines[-3:]
        return (
            False,
            f"docker unreachable ({e}); "
            f"scripts/docker-setup.sh rc={r.returncode}: {' | '.join(tail)}",
        )


def _have_image(client: Any, name: str) -> bool:
    import docker.errors

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def _images(client: Any) -> tuple[str, str]:
    image = os.environ.get("THEMIS_IMAGE") or next(
        (i for i in ("themis/yarn:latest", "themis/hadoop:latest") if _have_image(client, i)), ""
    )
    if not image:
        if os.environ.get("THEMIS_IT_BUILD", "1") == "0":
            pytest.skip("no themis/* images and THEMIS_IT_BUILD=0 (run docker/build.sh)")
        r = subprocess.run(
            ["bash", str(ROOT / "docker" / "build.sh")], stdin=subprocess.DEVNULL, timeout=3000
        )
        assert r.returncode == 0, "docker/build.sh failed"
        image = (
            "themis/yarn:latest"
            if _have_image(client, "themis/yarn:latest")
            else "themis/hadoop:latest"
        )
    nm_image = os.environ.get("THEMIS_NM_IMAGE") or (
        "themis/yarn-tf:latest" if _have_image(client, "themis/yarn-tf:latest") else image
    )
    return image, nm_image


def _port_busy(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _remove_leftovers(client: Any) -> None:
    """Containers of an earlier mini-cluster (docker/minicluster.sh or a crashed test run)."""
    for c in client.containers.list(all=True, filters={"label": "themis.minicluster=1"}):
        c.remove(force=True)


def _nodes() -> dict[str, dict[str, Any]]:
    out = {}
    for n in (_get(f"{RM}/ws/v1/cluster/nodes").get("nodes") or {}).get("node", []):
        infos = (n.get("totalResource", {}).get("resourceInformations") or {}).get(
            "resourceInformation", []
        )
        gpus = next((int(i["value"]) for i in infos if i.get("name") == "yarn.io/gpu"), 0)
        out[n["nodeHostName"]] = {
            "id": n["id"],
            "state": n["state"],
            "rack": n.get("rack"),
            "gpus": gpus,
        }
    return out


def _ready() -> bool:
    try:
        nodes = _nodes()
        if any(nodes.get(k, {}).get("state") != "RUNNING" for k in NMS):
            return False
        bean = _get(f"{NN}/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState")["beans"][0]
        info = _get(f"{NN}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo")["beans"][0]
        return bool(bean["NumLiveDataNodes"] >= 1 and not info.get("Safemode"))
    except (OSError, ValueError, KeyError, IndexError, urllib.error.URLError):
        return False


# ----------------------------------------------------------------------------------- fixture
@pytest.fixture(scope="module")
def minicluster() -> Iterator[dict[str, Any]]:
    ok, why = _docker_available()  # runs scripts/docker-setup.sh when no daemon answers
    if not ok:
        skip_or_fail(why)

    from testcontainers.core.container import DockerContainer

    client = _docker_client()
    image, nm_image = _images(client)
    _remove_leftovers(client)
    busy = [p for p in PORTS if _port_busy(p)]
    assert not busy, f"ports already in use on 127.0.0.1 (another cluster?): {busy}"

    aliases = " ".join(NMS)

    def daemon(role: str, image_: str, name: str, **env: str) -> DockerContainer:
        c = (
            DockerContainer(image_)
            .with_command(role)
            .with_name(f"themis-it-{name}-{os.getpid()}")
            .with_env("THEMIS_HOST_ALIASES", aliases)
            .with_kwargs(network_mode="host", labels=LABEL, stop_signal="SIGTERM")
        )
        for k, v in env.items():
            c = c.with_env(k, v)
        return c

    containers: list[DockerContainer] = [
        daemon("namenode", image, "nn"),
        daemon("datanode", image, "dn"),
        daemon("resourcemanager", image, "rm"),
    ]
    for i, (name, (gpus, _rack)) in enumerate(NMS.items(), start=1):
        containers.append(
            daemon(
                "nodemanager",
                nm_image,
                name,
                THEMIS_NM_NAME=name,
                THEMIS_NM_INDEX=str(i),
                THEMIS_NM_GPUS=str(gpus),
            )
        )
    started: list[DockerContainer] = []
    t0 = time.monotonic()
    try:
        for c in containers:
            c.start()
            started.append(c)
        while not _ready():
            for c in started:
                wrapped = c.get_wrapped_container()
                wrapped.reload()
                if wrapped.status != "running":
                    logs = wrapped.logs(tail=40).decode(errors="replace")
                    pytest.fail(f"{wrapped.name} exited ({wrapped.status}):\n{logs}")
            if time.monotonic() - t0 > READY_TIMEOUT_S:
                pytest.fail(
                    f"mini-cluster not ready after {READY_TIMEOUT_S}s: nodes={_safe_nodes()}"
                )
            time.sleep(2)
        yield {"image": image, "nm_image": nm_image, "startup_s": time.monotonic() - t0}
    finally:
        for c in reversed(started):
            with contextlib.suppress(Exception):  # best-effort teardown
                c.stop()  # stop + remove


def _safe_nodes() -> Any:
    try:
        return _nodes()
    except Exception as e:
        return repr(e)


# ----------------------------------------------------------------------------------- tests
def test_three_nodemanagers_with_gpus_on_two_racks(minicluster: dict[str, Any]) -> None:
    nodes = _nodes()
    assert set(nodes) == set(NMS), nodes
    for name, (gpus, rack) in NMS.items():
        n = nodes[name]
        assert n["state"] == "RUNNING", n
        assert n["gpus"] == gpus, n
        assert n["rack"] == rack, n
    # NMs share 127.0.0.1 and are told apart by alias and port: NodeId = alias:port
    assert {n["id"] for n in nodes.values()} == {"nm1:8041", "nm2:8141", "nm3:8241"}
    assert len({n["rack"] for n in nodes.values()}) == 2
    assert sum(n["gpus"] for n in nodes.values()) == 8


def test_webhdfs_write_then_read(minicluster: dict[str, Any]) -> None:
    path = f"/themis-it/hello-{os.getpid()}.txt"
    payload = f"themis mini-cluster {time.time()}\n".encode()
    # two-step create: the NameNode answers 307 with the DataNode's URL (127.0.0.1:9864)
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
    assert location.startswith("http://127.0.0.1:9864/"), location
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
    """The RM reaches the NMs by alias (nm1:8041, ...) to launch an AM container. The command is
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
