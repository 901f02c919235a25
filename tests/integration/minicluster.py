"""The dockerised mini-cluster for integration tests: NameNode, DataNode, ResourceManager
and three NodeManagers (yarn.io/gpu 4/2/2 on two racks), each a host of its own (a
container with its own network namespace, host name and fixed address on the Docker bridge
network ``themis-mc-net``, 172.31.0.0/24, as docker/minicluster.sh makes it), managed with
testcontainers. The tests reach the services at the containers' addresses (the machine is
172.31.0.1 on that network). Shared by test_minicluster.py, test_am_e2e.py and others.

Environment:
  THEMIS_IT_BUILD=0     do not run docker/build.sh when images are missing (skip instead)
  THEMIS_IMAGE, THEMIS_NM_IMAGE   images to use (defaults as docker/minicluster.sh)
  THEMIS_REQUIRE_DOCKER=1         fail instead of skipping when Docker is unusable
  THEMIS_IT_KEEP=1      leave the containers (and the network) running after the tests
  THEMIS_IT_MOUNT_SRC=1 mount this checkout's themis/ package, docker/conf/*-site.xml (and
                        docker/conf/secure), docker/bin/themis-daemon and rm-plugin/target's
                        plugin jar over the images' copies

``running_minicluster(prefix, secure=True)`` starts the Kerberos profile (as
``docker/minicluster.sh up --secure``; docs/minicluster.md, "Secure profile"): a KDC host
``kdc`` (172.31.0.8, realm THEMIS.TEST) and every daemon with Kerberos, SPNEGO, HDFS
permissions and queue ACLs. The machine talks to it with curl --negotiate (``kinit``,
``negotiate``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

# Ryuk (the reaper container) would have to be pulled from a registry: we have none.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

ROOT = Path(__file__).resolve().parents[2]
LABEL = {"themis.minicluster": "1"}
# name -> (yarn.io/gpu, rack); must match docker/conf/topology.table (the image's default table)
NMS: dict[str, tuple[int, str]] = {"nm1": (4, "/rack1"), "nm2": (2, "/rack1"), "nm3": (2, "/rack2")}
# The network and each host's address: as docker/minicluster.sh (THEMIS_MC_NET/_SUBNET).
NET = "themis-mc-net"
SUBNET = "172.31.0"
ADDR: dict[str, str] = {"nn": f"{SUBNET}.2", "dn": f"{SUBNET}.3", "rm": f"{SUBNET}.4",
                        **{n: f"{SUBNET}.{10 + i}" for i, n in enumerate(NMS, start=1)}}
# RM HA (``running_minicluster(ha=True)``, ``docker/minicluster.sh up --ha``): ZooKeeper and
# two RMs whose ids are their host names, instead of ``rm``
HA_IDS = ("rm1", "rm2")
HA_ADDR: dict[str, str] = {"zk": f"{SUBNET}.5", "rm1": f"{SUBNET}.6", "rm2": f"{SUBNET}.7"}
# The secure profile (``running_minicluster(secure=True)``, ``docker/minicluster.sh up
# --secure``): the KDC's host, the realm, and the user principals' passwords (the kdc role's
# default THEMIS_KRB_USERS in docker/bin/themis-daemon); each user also has a keytab.
KDC_ADDR = f"{SUBNET}.8"
REALM = "THEMIS.TEST"
KRB_USERS: dict[str, str] = {"alice": "alice-pw", "bob": "bob-pw", "admin": "admin-pw"}
RM = f"http://{ADDR['rm']}:8088"
NN = f"http://{ADDR['nn']}:9870"
READY_TIMEOUT_S = 180
# The labeled mini-cluster (``docker/minicluster.sh up --labels`` reads the same file)
NODE_LABELS_FILE = ROOT / "docker" / "conf" / "node-labels.json"


def node_label_profile() -> dict[str, Any]:
    """docker/conf/node-labels.json: ``yarn_site`` and ``capacity_scheduler`` (the RM's
    ``conf_overrides`` and ``cs_overrides``), ``nm_gpus``, ``cluster_labels`` and ``nodes``
    (node -> label; applied with :func:`label_admin_args` once the cluster runs)."""
    profile: dict[str, Any] = json.loads(NODE_LABELS_FILE.read_text())
    return profile


def label_admin_args(profile: Mapping[str, Any]) -> list[list[str]]:
    """The ``rmadmin`` calls that label a running cluster as ``profile`` says, in order (as
    ``docker/minicluster.sh up --labels`` makes them)."""
    nodes = " ".join(f"{n}={label}" for n, label in sorted(profile["nodes"].items()))
    return [["-addToClusterNodeLabels", ",".join(profile["cluster_labels"])],
            ["-replaceLabelsOnNode", nodes],
            ["-refreshQueues"]]


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


def _ensure_network(client: Any) -> None:
    """The mini-cluster's bridge network (created as docker/minicluster.sh does)."""
    import docker.errors
    from docker.types import IPAMConfig, IPAMPool

    try:
        net = client.networks.get(NET)
    except docker.errors.NotFound:
        client.networks.create(NET, driver="bridge", labels=LABEL, ipam=IPAMConfig(
            pool_configs=[IPAMPool(subnet=f"{SUBNET}.0/24", gateway=f"{SUBNET}.1")]))
        return
    subnets = [c.get("Subnet") for c in (net.attrs.get("IPAM") or {}).get("Config") or []]
    assert subnets == [f"{SUBNET}.0/24"], \
        f"network {NET} has subnets {subnets}, not {SUBNET}.0/24 (docker network rm {NET})"


def _remove_leftovers(client: Any) -> None:
    """Containers of an earlier mini-cluster (docker/minicluster.sh or a crashed test run)."""
    for c in client.containers.list(all=True, filters={"label": "themis.minicluster=1"}):
        c.remove(force=True)


def kinit(krb: Mapping[str, Any], user: str, ccache: str | None = None) -> dict[str, str]:
    """Log ``user`` (alice, bob, admin) in with its keytab, on the machine, against the
    secure profile's KDC (``krb``: the ``"kerberos"`` entry that ``running_minicluster(...,
    secure=True)`` yields). Returns the environment (KRB5_CONFIG, KRB5CCNAME) under which
    curl, klist ... act as that user; the ticket cache is a file of its own in ``krb["dir"]``
    unless ``ccache`` names one."""
    env = {**os.environ, "KRB5_CONFIG": str(krb["krb5_conf"]),
           "KRB5CCNAME": "FILE:" + (ccache or os.path.join(krb["dir"], f"{user}.ccache"))}
    r = subprocess.run(["kinit", "-kt", str(krb["keytabs"][user]), f"{user}@{krb['realm']}"],
                       env=env, capture_output=True, text=True, timeout=30)
    if r.returncode:
        raise RuntimeError(f"kinit {user}: {r.stderr.strip()}")
    return env


def negotiate(url: str, env: Mapping[str, str] | None, method: str = "GET",
              timeout: float = 10, curl_args: Sequence[str] = ()) -> tuple[int, str]:
    """(HTTP status, body) of ``curl --negotiate`` (SPNEGO with the ticket cache of ``env``;
    ``env=None``: no ticket at all); ``curl_args`` are passed on (e.g. ``--resolve``)."""
    if env is None:
        env = {**os.environ, "KRB5CCNAME": "FILE:/nonexistent/themis-no-ticket"}
    r = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--max-time",
                        str(timeout), "--negotiate", "-u", ":", "-X", method, *curl_args, url],
                       env=dict(env), capture_output=True, text=True, timeout=timeout + 5)
    body, _, code = r.stdout.rpartition("\n")
    return int(code or 0), body


def _negotiate_json(env: Mapping[str, str]) -> Any:
    """A ``_get`` for the secure profile: JSON over SPNEGO."""
    def get(url: str, timeout: float = 5.0) -> Any:
        code, body = negotiate(url, env, timeout=timeout)
        if code != 200:
            raise OSError(f"HTTP {code} from {url}: {body[:200]}")
        return json.loads(body)
    return get


def _nodes(rm: str = RM, get: Any = _get) -> dict[str, dict[str, Any]]:
    out = {}
    for n in (get(f"{rm}/ws/v1/cluster/nodes").get("nodes") or {}).get("node", []):
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


def _ready(rm: str = RM, get: Any = _get, secure: bool = False) -> bool:
    try:
        nodes = _nodes(rm, get)
        if any(nodes.get(k, {}).get("state") != "RUNNING" for k in NMS):
            return False
        bean = get(f"{NN}/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState")["beans"][0]
        info = get(f"{NN}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo")["beans"][0]
        if secure:  # the namenode's HDFS layout for the users ends with this mode
            st = get(f"{NN}/webhdfs/v1/tmp/hadoop-yarn/staging?op=GETFILESTATUS")
            if st["FileStatus"]["permission"] != "1777":
                return False
        return bool(bean["NumLiveDataNodes"] >= 1 and not info.get("Safemode"))
    except (OSError, ValueError, KeyError, IndexError, urllib.error.URLError):
        return False


def _safe_nodes(rm: str = RM, get: Any = _get) -> Any:
    try:
        return _nodes(rm, get)
    except Exception as e:
        return repr(e)


def rm_url(rm_id: str) -> str:
    """The REST API of the RM with this HA id (``rm1``, ``rm2``)."""
    return f"http://{HA_ADDR[rm_id]}:8088"


def ha_state(rm_id: str) -> str:
    """``ACTIVE``, ``STANDBY``, ... as that RM reports it; ``DOWN`` when it does not answer."""
    try:
        return str(_get(f"{rm_url(rm_id)}/ws/v1/cluster/info", timeout=3)["clusterInfo"]
                   ["haState"])
    except (OSError, ValueError, KeyError, urllib.error.URLError):
        return "DOWN"


def active_rm() -> str | None:
    """The HA id of the active RM, if one is. The RMs are asked at once: a killed RM's host
    answers nothing, and asking it first would add its timeout (3 s) to every call."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    pool = ThreadPoolExecutor(len(HA_IDS))
    try:
        asks = {pool.submit(ha_state, i): i for i in HA_IDS}
        return next((asks[f] for f in as_completed(asks) if f.result() == "ACTIVE"), None)
    finally:
        pool.shutdown(wait=False)  # a dead host's ask ends on its own timeout



@contextlib.contextmanager
def running_minicluster(
    prefix: str,
    *,
    conf_overrides: Mapping[str, str] | None = None,
    extra_ports: Sequence[int] = (),
    mounts: Mapping[str, str] | None = None,
    rm_image: str | None = None,
    rm_volumes: Mapping[str, str] | None = None,
    ha: bool = False,
    zk_timeout_ms: int = 4000,
    secure: bool = False,
    cs_overrides: Mapping[str, str] | None = None,
    nm_gpus: Mapping[str, int] | None = None,
    nm_conf_overrides: Mapping[str, str] | None = None,
    nm_local_mb: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Start the mini-cluster (Docker set up and images built when needed), wait until every
    NodeManager runs and HDFS has left safe mode, yield ``{"containers", "image",
    "nm_image", "startup_s"}``, and stop everything afterwards. ``conf_overrides`` are
    yarn-site.xml settings for the RM; ``mounts`` maps host paths to container paths
    (read-only, every container). ``rm_image`` runs the ResourceManager from another image
    (e.g. ``themis/hadoop``: stock Hadoop); ``rm_volumes`` maps host paths to paths in the
    RM container, read-write (e.g. its configuration template). ``ha``: ZooKeeper and two RMs
    (``HA_IDS``, automatic failover, ZKRMStateStore; as ``docker/minicluster.sh up --ha``)
    instead of one; ready when one of them is active; ``zk_timeout_ms``: the RMs' ZooKeeper
    session timeout. ``secure``: the Kerberos profile (not with ``ha``): a KDC host ``kdc``
    and every daemon secured, ready once admin sees the nodes over SPNEGO and HDFS is laid
    out for the users; the dict has ``"kerberos": {"realm", "krb5_conf", "keytabs": {user:
    path}, "dir"}`` in addition (host paths; ``kinit`` and ``negotiate`` use it).
    ``cs_overrides``: capacity-scheduler.xml settings for the RM (queues, node labels);
    ``nm_gpus``: GPUs of some NodeManagers instead of ``NMS``' (0: a CPU-only node);
    ``nm_conf_overrides``: yarn-site.xml settings for the NodeManagers' hosts (what the
    AMs and job containers there read); ``nm_local_mb``: the NodeManagers' local directories
    (``/data/nm-local``: containers' working directories, localized files) on a tmpfs of that
    many MiB instead of the image's file system, so that a test can fill them without filling
    this machine's disk (fault_trials.py, ``nm-disk-full``)."""
    if secure and ha:
        raise ValueError("running_minicluster: secure=True with ha=True is not supported")
    ok, why = _docker_available()  # runs scripts/docker-setup.sh when no daemon answers
    if not ok:
        skip_or_fail(why)

    from testcontainers.core.container import DockerContainer

    client = _docker_client()
    image, nm_image = _images(client)
    _remove_leftovers(client)
    del extra_ports  # every host has its own addresses: no port of this machine is used
    _ensure_network(client)
    all_mounts = {**source_mounts(), **(mounts or {})}
    addr = {**ADDR, **HA_ADDR} if ha else ADDR
    if ha:
        addr = {k: v for k, v in addr.items() if k != "rm"}
    # every daemon's environment: the HA keys, or the secure profile's switch
    daemon_env = {"THEMIS_RM_HA": ",".join(HA_IDS), "THEMIS_ZK_ADDRESS": "zk:2181",
                  "THEMIS_ZK_TIMEOUT_MS": str(zk_timeout_ms)} if ha else {}
    # Secure profile: the kdc host writes keytabs and krb5.conf into a directory of this
    # machine, which it mounts read-write and every other host read-only at /krb
    krb_dir = tempfile.mkdtemp(prefix="themis-krb-") if secure else ""
    krb: dict[str, Any] = {}
    krb_ro: dict[str, str] = {}
    if secure:
        addr = {"kdc": KDC_ADDR, **addr}
        daemon_env = {"THEMIS_SECURE": "1"}
        krb_ro = {krb_dir: "/krb"}
        krb = {"realm": REALM, "dir": krb_dir, "krb5_conf": os.path.join(krb_dir, "krb5.conf"),
               "keytabs": {u: os.path.join(krb_dir, "keytabs", f"{u}.keytab")
                           for u in KRB_USERS}}

    def daemon(role: str, image_: str, name: str, volumes: Mapping[str, str] | None = None,
               extra_mounts: Mapping[str, str] | None = None, skip: Sequence[str] = (),
               tmpfs: Mapping[str, str] | None = None, **env: str) -> DockerContainer:
        c = (
            DockerContainer(image_)
            .with_command(role)
            .with_name(f"themis-{prefix}-{name}-{os.getpid()}")
            .with_kwargs(
                network=NET, hostname=name, labels=LABEL, stop_signal="SIGTERM",
                networking_config={NET: client.api.create_endpoint_config(
                    ipv4_address=addr[name])},
                extra_hosts=dict(addr))
        )
        for inside, options in (tmpfs or {}).items():  # Docker's tmpfs mount options
            c = c.with_tmpfs_mount(inside, options)
        for host, inside in {**all_mounts, **krb_ro, **(extra_mounts or {})}.items():
            if inside in skip or any(inside.startswith(v.rstrip("/") + "/")
                                     for v in (volumes or {}).values()):
                continue  # a read-write volume (e.g. the RM's conf template) replaces it
            c = c.with_volume_mapping(host, inside, "ro")
        for host, inside in (volumes or {}).items():
            c = c.with_volume_mapping(host, inside, "rw")
        for k, v in {**daemon_env, **env}.items():
            c = c.with_env(k, v)
        return c

    rm_env = {}
    if conf_overrides:
        rm_env["THEMIS_CONF_OVERRIDES"] = ";".join(f"{k}={v}" for k, v in conf_overrides.items())
    if cs_overrides:
        rm_env["THEMIS_CS_OVERRIDES"] = ";".join(f"{k}={v}" for k, v in cs_overrides.items())
    nm_env = {"THEMIS_CONF_OVERRIDES": ";".join(f"{k}={v}" for k, v
                                                in nm_conf_overrides.items())} \
        if nm_conf_overrides else {}
    containers: list[DockerContainer] = []
    if secure:  # first: the others wait for the keytabs it publishes; /krb read-write
        containers.append(daemon("kdc", image, "kdc", {krb_dir: "/krb"}, skip=("/krb",)))
    containers += [
        daemon("namenode", image, "nn"),
        daemon("datanode", image, "dn"),
    ]
    if ha:
        containers.append(daemon("zookeeper", image, "zk"))
        containers += [daemon("resourcemanager", image, i, None, extra_mounts=plugin_mount(),
                              THEMIS_RM_ID=i, **rm_env) for i in HA_IDS]
    else:
        containers.append(daemon("resourcemanager", rm_image or image, "rm", rm_volumes,
                                 extra_mounts=plugin_mount() if rm_image is None else None,
                                 skip=(IMAGE_SITE,) if rm_image is not None else (), **rm_env))
    for i, (name, (gpus, _rack)) in enumerate(NMS.items(), start=1):
        gpus = (nm_gpus or {}).get(name, gpus)
        containers.append(
            daemon("nodemanager", nm_image, name, THEMIS_NM_NAME=name,
                   tmpfs={"/data/nm-local": f"size={nm_local_mb}m"} if nm_local_mb else None,
                   THEMIS_NM_INDEX=str(i), THEMIS_NM_GPUS=str(gpus), **nm_env)
        )
    started: list[DockerContainer] = []
    t0 = time.monotonic()
    get: Any = _get
    # secure: readiness is checked as admin over SPNEGO, once the KDC has published the keytabs
    krb_admin: dict[str, str] = {}

    def ready() -> bool:
        nonlocal get
        if not secure:
            return _ready(rm_url(active_rm() or HA_IDS[0])) if ha else _ready()
        if not krb_admin:
            if not os.path.exists(krb["keytabs"]["admin"]):
                return False
            krb_admin.update(kinit(krb, "admin"))
            get = _negotiate_json(krb_admin)
        return _ready(RM, get, secure=True)

    try:
        for c in containers:
            c.start()
            started.append(c)
        while not ready():
            for c in started:
                wrapped = c.get_wrapped_container()
                wrapped.reload()
                if wrapped.status != "running":
                    logs = wrapped.logs(tail=40).decode(errors="replace")
                    pytest.fail(f"{wrapped.name} exited ({wrapped.status}):\n{logs}")
            if time.monotonic() - t0 > READY_TIMEOUT_S:
                states = {i: ha_state(i) for i in HA_IDS} if ha else {}
                rm_logs = "".join(
                    f"\n==== {w.name}\n" + w.logs(tail=30).decode(errors="replace")
                    for w in (c.get_wrapped_container() for c in started)
                    if "-rm" in w.name or "-zk-" in w.name
                    or (secure and ("-kdc-" in w.name or "-nn-" in w.name)))
                pytest.fail(f"mini-cluster not ready after {READY_TIMEOUT_S}s: "
                            f"nodes={_safe_nodes(rm_url(active_rm() or HA_IDS[0]) if ha else RM, get)}"
                            f"{f' RMs={states}' if ha else ''}{rm_logs}")
            time.sleep(2)
        out = {"containers": started, "image": image, "nm_image": nm_image,
               "startup_s": time.monotonic() - t0}
        if secure:
            out["kerberos"] = krb
        yield out
    finally:
        if os.environ.get("THEMIS_IT_KEEP") != "1":
            for c in reversed(started):
                with contextlib.suppress(Exception):  # best-effort teardown
                    c.stop()  # stop + remove
            with contextlib.suppress(Exception):
                client.networks.get(NET).remove()
            if krb_dir:
                shutil.rmtree(krb_dir, ignore_errors=True)


# The package inside the images (THEMIS_IT_MOUNT_SRC=1 mounts the checkout's over it).
IMAGE_SITE = "/opt/themis/venv/lib/python3.11/site-packages/themis"


def themis(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``themis ARGS`` on the host (the client side of the mini-cluster tests), pointed at
    the RM and WebHDFS at their containers' addresses."""
    env = {**os.environ, "THEMIS_RM_URL": RM, "THEMIS_WEBHDFS_URL": NN}
    return subprocess.run([sys.executable, "-m", "themis.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


def source_mounts() -> dict[str, str]:
    """With THEMIS_IT_MOUNT_SRC=1: this checkout's ``themis`` package, launcher and Hadoop
    config templates over the images' copies, in every container (the package not in an RM
    of another image: ``rm_image``)."""
    if os.environ.get("THEMIS_IT_MOUNT_SRC") != "1":
        return {}
    out = {str(ROOT / "themis"): IMAGE_SITE,
           str(ROOT / "docker" / "bin" / "themis-daemon"): "/usr/local/bin/themis-daemon"}
    for f in ("core-site", "hdfs-site", "yarn-site", "mapred-site"):
        out[str(ROOT / "docker" / "conf" / f"{f}.xml")] = f"/opt/hadoop/conf.template/{f}.xml"
    out[str(ROOT / "docker" / "conf" / "secure")] = "/opt/hadoop/conf.template/secure"
    return out


def plugin_mount() -> dict[str, str]:
    """With THEMIS_IT_MOUNT_SRC=1 and the plugin built: rm-plugin/target's jar over the RM
    image's copy (only for the themis/yarn RM)."""
    jar = ROOT / "rm-plugin" / "target" / "themis-rm-plugin-0.1.0.jar"
    if os.environ.get("THEMIS_IT_MOUNT_SRC") != "1" or not jar.is_file():
        return {}
    return {str(jar): "/opt/themis/plugin/themis-rm-plugin-0.1.0.jar"}


def am_jar_and_mounts() -> dict[str, str] | None:
    """Build the AM jar if it is missing; the source mounts THEMIS_IT_MOUNT_SRC asks for."""
    jar = ROOT / "submarine-am" / "target" / "themis-submarine-am-0.1.0.jar"
    if not jar.is_file():
        r = subprocess.run(["mvn", "-q", "-B", "-o", "-pl", "submarine-am", "package",
                            "-DskipTests"], cwd=ROOT, timeout=600)
        assert r.returncode == 0 and jar.is_file(), "cannot build the AM jar"
    return {str(ROOT / "themis"): IMAGE_SITE} if os.environ.get("THEMIS_IT_MOUNT_SRC") == "1" \
        else None


# ------------------------------------------------------------------- the hosts' network view
def hosts(cluster: Mapping[str, Any]) -> dict[str, Any]:
    """Host name (nn, dn, rm, nm1...) -> its running docker container."""
    out = {}
    for c in cluster["containers"]:
        w = c.get_wrapped_container()
        w.reload()
        out[w.attrs["Config"]["Hostname"]] = w
    return out


def address_of(container: Any) -> str:
    """The container's address on the mini-cluster network (what Docker assigned)."""
    container.reload()
    return str(container.attrs["NetworkSettings"]["Networks"][NET]["IPAddress"])


def _hex_addr(h: str) -> str:
    if len(h) == 8:  # IPv4, little-endian
        return ".".join(str(int(h[i:i + 2], 16)) for i in (6, 4, 2, 0))
    if h[:24] == "0000000000000000FFFF0000":  # IPv4-mapped IPv6
        return _hex_addr(h[24:])
    return "::" if set(h) == {"0"} else "::1" if h == "0" * 24 + "01000000" else h


# The Docker CLI the tests run ``docker exec`` with: Debian's, which matches its daemon,
# as scripts/docker-setup.sh prefers; any other on the PATH otherwise.
DOCKER_CLI = "/usr/bin/docker" if os.access("/usr/bin/docker", os.X_OK) else "docker"


def exec_argv(container: Any, cmd: Sequence[str],
              env: Mapping[str, str] | None = None) -> list[str]:
    """The Docker CLI's command line that runs ``cmd`` in ``container`` (with ``env``):
    for :func:`docker_exec`, and for a caller that reads the output as it comes."""
    args = [DOCKER_CLI, "exec"]
    for k, v in (env or {}).items():
        args += ["-e", f"{k}={v}"]
    return [*args, container.name, *cmd]


def docker_exec(container: Any, cmd: Sequence[str], env: Mapping[str, str] | None = None,
                merge_stderr: bool = False,
                timeout: float | None = 900) -> subprocess.CompletedProcess[str]:
    """``cmd`` run in ``container`` with the Docker CLI; its exit code, stdout and stderr
    (or both in one stream with ``merge_stderr``: each line whole, but a line of one stream
    may come before a line the other printed earlier), decoded leniently.

    Not docker-py's ``exec_run``: that reads the exec's multiplexed stream from the raw
    socket under the HTTP response's buffered reader, so the bytes the reader took in with
    the response's headers are lost (docker/docker-py#3332, #2042): on a loaded machine a
    short command's output came back empty, or cut so that the stream's framing broke
    ("49 is not a valid stream": a header read from the middle of /proc/net/tcp). The CLI
    reads the stream whole."""
    return subprocess.run(exec_argv(container, cmd, env), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                          text=True, errors="replace", timeout=timeout, check=False)


def exec_stdout(container: Any, cmd: Sequence[str], valid: Callable[[str], bool],
                what: str, attempts: int = 3) -> str:
    """The stdout of a read-only command run in ``container`` once it passes ``valid``:
    an output that fails ``valid`` (a file not written yet, a page not served yet) is read
    again, and after ``attempts`` tries the check fails naming ``what``, the exit code and
    stderr. Only for commands that change nothing: they may run more than once."""
    r: subprocess.CompletedProcess[str] | None = None
    for attempt in range(attempts):
        r = docker_exec(container, cmd, timeout=300)
        if r.returncode == 0 and valid(r.stdout):
            return r.stdout
        time.sleep(0.5 * (attempt + 1))
    assert r is not None
    raise AssertionError(f"{what} ({container.name}): exit {r.returncode}, "
                         f"stdout {r.stdout[-300:]!r}, stderr {r.stderr[-300:]!r}")


END_OF_OUTPUT = "== end of output =="


def shell_read(container: Any, script: str, what: str) -> str:
    """The stdout of a shell ``script`` that only reads (log files, /proc), run in
    ``container``: the script's output ends with a marker line, so a cut output is told
    from a script that printed nothing; returned without the marker."""
    text = exec_stdout(container, ["sh", "-c", f"{script}\necho '{END_OF_OUTPUT}'"],
                       lambda t: t.rstrip().endswith(END_OF_OUTPUT), what)
    return text.rstrip()[:-len(END_OF_OUTPUT)]


def tcp_sockets(container: Any) -> list[tuple[str, str, int, str, int]]:
    """(state, local address, local port, remote address, remote port) of the container's
    TCP sockets (/proc/net/tcp and tcp6 inside it); state LISTEN or ESTABLISHED or other."""
    # The table's header ("sl local_address ...") is always there: an output without it
    # is a failed read. A line that does not parse is skipped.
    text = exec_stdout(container, ["cat", "/proc/net/tcp", "/proc/net/tcp6"],
                       lambda t: "local_address" in t, "the TCP sockets")
    states = {"0A": "LISTEN", "01": "ESTABLISHED"}
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) < 4 or ":" not in f[1] or f[0] == "sl":
            continue
        try:
            (la, lp), (ra, rp) = f[1].split(":"), f[2].split(":")
            out.append((states.get(f[3], f[3]), _hex_addr(la), int(lp, 16), _hex_addr(ra),
                        int(rp, 16)))
        except ValueError:
            continue
    return out
