"""Jobs in Docker images through YARN's Docker runtime (``job.docker_image``,
``tasks.ps.docker_image``; Submarine's ``--docker_image`` / ``--worker_docker_image`` /
``--ps_docker_image``).

YARN runs a container in a Docker image when its launch environment says so
(``YARN_CONTAINER_RUNTIME_TYPE=docker`` and ``YARN_CONTAINER_RUNTIME_DOCKER_IMAGE``) *and*
its NodeManager runs the ``LinuxContainerExecutor`` with ``docker`` among
``yarn.nodemanager.runtime.linux.allowed-runtimes``. Any other NodeManager ignores those
variables and would run the job in its own environment: an image silently not used. So the
AM reads the configuration of every NodeManager with GPUs (the daemon's ``/conf`` page, as
``hadoop conf`` would) before it starts anything, and refuses the app, naming each
NodeManager and the missing setting, unless all of them run the Docker runtime; a
NodeManager that joins later is checked before a job's container is launched on it
(docs/am.md, "Docker images").
"""

from __future__ import annotations

import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping
from typing import Any

RUNTIMES_KEY = "yarn.nodemanager.runtime.linux.allowed-runtimes"
EXECUTOR_KEY = "yarn.nodemanager.container-executor.class"
LCE = "org.apache.hadoop.yarn.server.nodemanager.LinuxContainerExecutor"
MAX_CONF_BYTES = 8 << 20  # a daemon's /conf page is ~0.3 MB


class DaemonConfError(RuntimeError):
    """A daemon's configuration could not be read (names the URL and the reason)."""


def read_conf(url: str, timeout: float = 15.0,
              fetch: Callable[[str, float], bytes] | None = None) -> dict[str, str]:
    """A Hadoop daemon's effective configuration: its ``/conf`` page (XML) at ``url``;
    ``fetch(url, timeout)`` reads it when the caller has an identity to send (a
    :class:`~themis.identity.http.HadoopSession`), raising OSError when it cannot."""
    try:
        if fetch is not None:
            raw = fetch(url, timeout)
        else:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                raw = r.read(MAX_CONF_BYTES + 1)
        if len(raw) > MAX_CONF_BYTES:
            raise DaemonConfError(f"GET {url}: more than {MAX_CONF_BYTES} bytes")
        root = ET.fromstring(raw)
    except (OSError, ET.ParseError) as e:
        raise DaemonConfError(f"GET {url}: {e}") from None
    out: dict[str, str] = {}
    for p in root.iter("property"):
        name, value = p.findtext("name"), p.findtext("value")
        if name is not None:
            out[name] = value or ""
    return out


def container_env(image: str) -> dict[str, str]:
    """The launch environment that runs a container in ``image`` ({} for none)."""
    if not image:
        return {}
    return {"YARN_CONTAINER_RUNTIME_TYPE": "docker",
            "YARN_CONTAINER_RUNTIME_DOCKER_IMAGE": image}


def node_problem(conf: Mapping[str, str]) -> str:
    """What keeps a NodeManager with configuration ``conf`` from running Docker containers
    ("" when nothing does)."""
    problems = []
    allowed = [x.strip().lower() for x in conf.get(RUNTIMES_KEY, "default").split(",")]
    if "docker" not in allowed:
        problems.append(f"{RUNTIMES_KEY} is {conf.get(RUNTIMES_KEY, 'default')!r} (needs "
                        f"docker)")
    executor = conf.get(EXECUTOR_KEY, "").strip()
    if executor != LCE:
        problems.append(f"{EXECUTOR_KEY} is {executor.rsplit('.', 1)[-1] or 'unset'!r} "
                        f"(needs LinuxContainerExecutor)")
    return " and ".join(problems)


def check_nodes(nodes: Iterable[Mapping[str, Any]],
                read: Callable[[str], Mapping[str, str]] = read_conf) -> str:
    """"" when every NodeManager with GPUs in ``nodes`` (the AM shell's node list: node,
    http, gpus) runs YARN's Docker runtime, else the refusal naming each one that does not
    and why."""
    gpu_nodes = [n for n in nodes if int(n.get("gpus", 0) or 0) > 0]
    if not gpu_nodes:
        return "no NodeManager with GPUs is running: cannot check YARN's Docker runtime"
    refused = []
    for n in gpu_nodes:
        http = str(n.get("http") or "")
        if not http:
            refused.append(f"{n.get('node')}: its web address is unknown")
            continue
        try:
            problem = node_problem(read(f"http://{http}/conf"))
        except DaemonConfError as e:
            problem = f"its configuration cannot be read ({e})"
        if problem:
            refused.append(f"{n.get('node')}: {problem}")
    if not refused:
        return ""
    return ("the job's Docker image needs YARN's Docker runtime on every NodeManager with "
            "GPUs (docs/am.md, 'Docker images'); " + "; ".join(refused))
