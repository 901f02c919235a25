"""The app's TensorBoard container, as the YARN AM runs it (spec ``tensorboard``; Submarine's
``--tensorboard``): one container without GPU running :mod:`.tbserve`, asked for when the
AM starts and released when it finishes (docs/am.md, "TensorBoard container").

* Where: a node-local ask (as every ask of the AM) on the AM's own NodeManager host when it
  is a running node, else the first running node by name; with ``tensorboard.docker_image``
  only among the nodes with GPUs (the ones the AM checked for YARN's Docker runtime). An ask
  not allocated within ``ask_timeout_s`` moves to the next node.
* Its URL: the server publishes it in HDFS (``<app dir>/tensorboard.json``) with its
  container id; the AM reads that file while the container runs and the URL is unknown.
* Failures: a container that exits on its own is asked for again, at most
  ``max_restarts`` times; then the TensorBoard is ``failed`` (with the exit status and
  YARN's diagnostics) and the app goes on: TensorBoard serves the user, not the jobs.
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Callable, Sequence
from typing import Any

from themis.am.launchers.yarn.launcher import PRIORITY_SERVICE, YarnContainerLauncher
from themis.am.specparts import TensorBoardSettings
from themis.hadoop.webhdfs import WebHdfs, WebHdfsError

log = logging.getLogger("themis.am.launchers.yarn.am")


class TensorBoardContainer:
    def __init__(self, settings: TensorBoardSettings, launcher: YarnContainerLauncher, *,
                 command: str, env: dict[str, str], publish: str, hdfs: WebHdfs | None,
                 clock: Callable[[], float], max_restarts: int = 3,
                 ask_timeout_s: float = 60.0) -> None:
        self.settings = settings
        self.launcher = launcher
        self.shell = launcher.shell
        self.command = command
        self.env = env
        self.publish = publish  # HDFS file of the server's URL
        self.hdfs = hdfs
        self.clock = clock
        self.max_restarts = max_restarts
        self.ask_timeout_s = ask_timeout_s
        self.state = "off"  # requested -> running -> stopped | failed (asked again between)
        self.url = ""
        self.node = ""
        self.container = ""
        self.restarts = 0
        self.message = ""
        self._hosts: list[str] = []
        self._host_index = 0
        self._request: int | None = None
        self._asked_at = 0.0
        self._url_checked = 0.0

    def start(self, hosts: Sequence[str]) -> None:
        """Ask for the container on the first of ``hosts`` (the others in turn later)."""
        self._hosts = list(hosts)
        if not self._hosts:
            self.state, self.message = "failed", "no running NodeManager to run it on"
            return
        self._ask()

    def _ask(self) -> None:
        host = self._hosts[self._host_index % len(self._hosts)]
        rid = self.shell.request(host, self.settings.memory_mb, self.settings.vcores, 0,
                                 PRIORITY_SERVICE)
        self._request, self._asked_at, self.state = rid, self.clock(), "requested"
        self.launcher.service_asks[rid] = self._allocated
        log.info("asking for the TensorBoard container on %s (request %d)", host, rid)

    def _allocated(self, container: str, node: str) -> None:
        self._request = None
        if self.state != "requested":  # stopped meanwhile
            self.shell.release(container)
            return
        self.container, self.node, self.url, self.state = container, node, "", "running"
        self.launcher.service_containers[container] = self._completed
        log.info("launching TensorBoard in %s on %s", container, node)
        self.shell.launch(container, self.command, json.dumps(self.env))

    def _completed(self, status: int, diagnostics: str) -> None:
        self.url = ""
        if self.state == "stopped":
            return
        self.restarts += 1
        if self.restarts > self.max_restarts:
            self.state = "failed"
            self.message = (f"exited {self.restarts} times (last: exit {status}"
                            f"{': ' + diagnostics[-300:] if diagnostics else ''}); see the "
                            f"logs of {self.container}")
            log.warning("TensorBoard %s", self.message)
            return
        log.warning("TensorBoard container %s exited (%d): asking again", self.container,
                    status)
        self._ask()

    def tick(self) -> None:
        """Move an ask that waits too long to the next node; read the published URL."""
        now = self.clock()
        if self.state == "requested" and self._request is not None \
                and now - self._asked_at > self.ask_timeout_s and len(self._hosts) > 1:
            self.shell.cancel_request(self._request)
            self.launcher.service_asks.pop(self._request, None)
            self._host_index += 1
            self._ask()
        if self.state == "running" and not self.url and self.hdfs is not None \
                and now - self._url_checked >= 2.0:
            self._url_checked = now
            try:
                raw = self.hdfs.read_latest(self.publish)
                doc = json.loads(raw) if raw else {}
            except (WebHdfsError, ValueError) as e:
                log.debug("TensorBoard URL not readable yet: %s", e)
                return
            if isinstance(doc, dict) and doc.get("container") == self.container:
                self.url = str(doc.get("url", ""))
                log.info("TensorBoard of the app: %s", self.url)

    def stop(self) -> None:
        """Release the container (or withdraw the ask): the app is finishing."""
        if self.state == "requested" and self._request is not None:
            self.shell.cancel_request(self._request)
            self.launcher.service_asks.pop(self._request, None)
        elif self.state == "running" and self.container:
            self.launcher.service_containers.pop(self.container, None)
            self.shell.release(self.container)
        if self.state in ("requested", "running"):
            self.state = "stopped"
        self.url = ""

    def status(self) -> dict[str, Any]:
        return {"state": self.state, "url": self.url or None, "node": self.node or None,
                "container": self.container or None, "restarts": self.restarts,
                "message": self.message}


def tbserve_command(python: str, src: str, publish: str) -> str:
    """The TensorBoard container's command."""
    return (f"{python} -m themis.am.launchers.yarn.tbserve --src {shlex.quote(src)} "
            f"--publish {shlex.quote(publish)} 1><LOG_DIR>/stdout 2><LOG_DIR>/stderr")
