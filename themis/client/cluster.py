"""The Submarine-style client: submit an app (spec + AM jar to HDFS, then the YARN REST API),
show its status (RM REST + the AM's JSON status through the RM's web proxy; the Themis
plugin's leases from the RM's ``/jmx``) and kill it.

Everything goes over HTTP (no Hadoop client jars on the user's machine): the RM REST API
(``/ws/v1/cluster/apps/new-application``, ``POST /ws/v1/cluster/apps``), the RM's
``/conf`` (its effective yarn-site.xml: classpath, Themis agent port, f, lease) and WebHDFS.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from themis.agent.endpoints import agent_addresses, from_mapping
from themis.am.spec import AppSpec
from themis.hadoop.dockerrt import DaemonConfError, read_conf
from themis.hadoop.webhdfs import WebHdfs

APP_TYPE = "THEMIS"
AM_MAIN = "org.themis.am.AppMaster"
PYTHON_KEY = "yarn.resourcemanager.themis.python-executable"
THEMIS_BEAN = "Hadoop:service=ResourceManager,name=Themis"
JVM_OPTS = " ".join((
    "-Xmx{heap}m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true",
    *(f"--add-opens=java.base/{p}=ALL-UNNAMED"
      for p in ("java.lang", "java.nio", "java.util", "sun.nio.ch")),
))


class ClientError(RuntimeError):
    """The cluster refused or could not be reached (names the call and the reason)."""


@dataclass
class Cluster:
    rm_url: str = "http://127.0.0.1:8088"
    webhdfs_url: str = "http://127.0.0.1:9870"
    user: str = "root"

    @classmethod
    def from_env(cls, rm: str | None = None, webhdfs: str | None = None,
                 user: str | None = None) -> Cluster:
        return cls(rm or os.environ.get("THEMIS_RM_URL", "http://127.0.0.1:8088"),
                   webhdfs or os.environ.get("THEMIS_WEBHDFS_URL", "http://127.0.0.1:9870"),
                   user or os.environ.get("HADOOP_USER_NAME") or "root")

    # ------------------------------------------------------------------ HTTP
    def _req(self, method: str, path: str, body: Any = None, timeout: float = 15.0) -> Any:
        url = path if path.startswith("http") else f"{self.rm_url}{path}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:500]
            raise ClientError(f"{method} {url}: HTTP {e.code}: {detail}") from None
        except OSError as e:
            raise ClientError(f"{method} {url}: {e}") from None
        return json.loads(raw) if raw else None

    def hdfs(self) -> WebHdfs:
        return WebHdfs(self.webhdfs_url, self.user)

    def rm_conf(self) -> dict[str, str]:
        """The RM's effective configuration (``/conf``, XML)."""
        try:
            return read_conf(f"{self.rm_url}/conf")
        except DaemonConfError as e:
            raise ClientError(str(e)) from None

    def arbiter_address(self, conf: dict[str, str]) -> str:
        """Where AMs reach the agents' endpoint: ``agent-address``, else the RM host and
        ``agent-port`` of the cluster's yarn-site.xml; with RM HA one candidate per RM id,
        comma-separated (:mod:`themis.agent.endpoints`). A host that names no particular
        machine (empty, 0.0.0.0, localhost, 127.x) is replaced by the host this client
        reached the RM at (``rm_url``)."""
        here = urllib.parse.urlsplit(self.rm_url).hostname or "127.0.0.1"
        return ",".join(agent_addresses(from_mapping(conf), unspecific=here))

    def app_dir(self, app_id: str) -> str:
        return f"/user/{self.user}/.themis/{app_id}"

    # ------------------------------------------------------------------ submit
    def submit(self, spec: AppSpec, am_jar: Path, *, python: str = "") -> str:
        """Upload and submit; ``python`` runs the AM's Python side and the jobs' runners
        (default: the cluster's ``yarn.resourcemanager.themis.python-executable``, else
        ``python3``). Its directory is put first on the job containers' PATH."""
        conf = self.rm_conf()
        python = python or conf.get(PYTHON_KEY, "") or "python3"
        new = self._req("POST", "/ws/v1/cluster/apps/new-application")
        app_id = str(new["application-id"])
        d = self.app_dir(app_id)
        fs = self.hdfs()
        fs.mkdirs(d)
        fs.write(f"{d}/spec.json", spec.to_json().encode())
        fs.write(f"{d}/am.jar", am_jar.read_bytes())
        st = fs.status(f"{d}/am.jar")
        assert st is not None
        classpath = conf.get("yarn.application.classpath", "")
        cp = "./*" + (":" + classpath.replace(",", ":") if classpath else "")
        arbiter = self.arbiter_address(conf)
        env = {
            "CLASSPATH": cp,
            "THEMIS_ARBITER": arbiter,
            "THEMIS_WEBHDFS_URL": self.webhdfs_url,
            "THEMIS_APP_DIR": d,
            "THEMIS_SPEC_PATH": f"{d}/spec.json",
            "THEMIS_AM_PYTHON": python,
            "HADOOP_USER_NAME": self.user,
            "PYTHONUNBUFFERED": "1",
            **agent_tls_env(conf),
        }
        if os.environ.get("THEMIS_AM_BIND_HOST"):  # the AM's HTTP bind address (am.http_hosts)
            env["THEMIS_AM_BIND_HOST"] = os.environ["THEMIS_AM_BIND_HOST"]
        heap = max(128, spec.am.memory_mb // 3)
        command = (f"java {JVM_OPTS.format(heap=heap)} {AM_MAIN} "
                   "1><LOG_DIR>/AppMaster.stdout 2><LOG_DIR>/AppMaster.stderr")
        body = {
            "application-id": app_id,
            "application-name": spec.name,
            "application-type": APP_TYPE,
            "queue": spec.queue,
            "max-app-attempts": spec.am.max_attempts,
            "keep-containers-across-application-attempts": False,
            "application-tags": {"tag": [f"themis-{spec.kind}"]},
            "am-container-spec": {
                "local-resources": {"entry": [{
                    "key": "themis-am.jar",
                    "value": {
                        "resource": f"hdfs://{_hdfs_authority(conf)}{d}/am.jar",
                        "type": "FILE", "visibility": "APPLICATION",
                        "size": int(st["length"]), "timestamp": int(st["modificationTime"]),
                    }}]},
                "environment": {"entry": [{"key": k, "value": v} for k, v in env.items()]},
                "commands": {"command": command},
            },
            "resource": {"memory": spec.am.memory_mb, "vCores": spec.am.vcores},
        }
        self._req("POST", f"/ws/v1/cluster/apps?user.name={self.user}", body)
        return app_id

    # ------------------------------------------------------------------ status / kill
    def apps(self, states: str = "") -> list[dict[str, Any]]:
        q = f"?applicationTypes={APP_TYPE}" + (f"&states={states}" if states else "")
        doc = self._req("GET", f"/ws/v1/cluster/apps{q}") or {}
        return list((doc.get("apps") or {}).get("app", []))

    def all_apps(self, states: str) -> list[dict[str, Any]]:
        """Apps of every type in ``states`` (comma-separated YARN states)."""
        doc = self._req("GET", f"/ws/v1/cluster/apps?states={states}") or {}
        return list((doc.get("apps") or {}).get("app", []))

    def themis_state(self) -> dict[str, Any]:
        """The Themis plugin's view of the GPUs (read-only): leases (app, node, GPUs, expiry),
        every app that holds or asks GPUs (agent or not, container asks, running GPUs, the
        wait reason in its diagnostics) and the stock-app policy; the RM's ``/jmx`` bean
        ``Hadoop:service=ResourceManager,name=Themis`` (docs/yarn.md)."""
        doc = self._req("GET", f"/jmx?qry={THEMIS_BEAN}") or {}
        beans = doc.get("beans") or []
        if not beans or "StatusJson" not in beans[0]:
            raise ClientError(
                f"the ResourceManager at {self.rm_url} runs no Themis plugin (no {THEMIS_BEAN} "
                "bean in its /jmx); its yarn.resourcemanager.scheduler.class must be "
                "org.themis.yarn.ThemisCapacityScheduler")
        try:
            state = json.loads(beans[0]["StatusJson"])
        except (TypeError, ValueError) as e:
            raise ClientError(f"GET {self.rm_url}/jmx: the Themis status is not JSON: {e}") \
                from None
        return dict(state)

    def app(self, app_id: str) -> dict[str, Any]:
        return dict(self._req("GET", f"/ws/v1/cluster/apps/{app_id}")["app"])

    def am_status(self, app_id: str) -> dict[str, Any] | None:
        """The AM's JSON status: through the RM's web proxy, else at the address the AM
        published in HDFS; after the app ended, its final ``result.json``."""
        for url in (f"{self.rm_url}/proxy/{app_id}/status", self._published(app_id)):
            if not url:
                continue
            try:
                doc = self._req("GET", url, timeout=5)
                if isinstance(doc, dict) and doc.get("app_id") == app_id:
                    return doc
            except (ClientError, ValueError):
                continue
        try:
            raw = self.hdfs().read_or_none(f"{self.app_dir(app_id)}/result.json")
        except Exception:
            return None
        if raw:
            status = json.loads(raw).get("status")
            return dict(status) if isinstance(status, dict) else None
        return None

    def _published(self, app_id: str) -> str:
        try:
            raw = self.hdfs().read_or_none(f"{self.app_dir(app_id)}/am.json")
        except Exception:
            return ""
        if not raw:
            return ""
        url = str(json.loads(raw).get("tracking_url", ""))
        return url.rstrip("/") + "/status" if url else ""

    def kill(self, app_id: str) -> str:
        doc = self._req("PUT", f"/ws/v1/cluster/apps/{app_id}/state?user.name={self.user}",
                        {"state": "KILLED"})
        return str((doc or {}).get("state", ""))


def agent_tls_env(conf: dict[str, str], env: Mapping[str, str] | None = None
                  ) -> dict[str, str]:
    """The AM's TLS settings for the agents' endpoint (docs/yarn.md, "Security"):
    ``THEMIS_ARBITER_TLS=off`` when the cluster set ``agent-tls.enabled=false``, else the CA
    certificate(s) the AM trusts, base64 PEM in ``THEMIS_ARBITER_TLS_CA``, read on this host
    from ``$THEMIS_AGENT_TLS_TRUST``, else the cluster's ``agent-tls.trust-file``, else its
    ``agent-tls.cert-file``. Raises ClientError naming the setting when none is readable."""
    from themis.hadoop.security import ARBITER_CA_ENV, ARBITER_TLS_ENV
    from themis.rpc.tls import CERT_KEY, ENABLED_KEY, TRUST_KEY, TlsError, read_pem

    if env is None:
        env = os.environ
    enabled = conf.get(ENABLED_KEY, "true").strip().lower() or "true"
    if enabled == "false":
        return {ARBITER_TLS_ENV: "off"}
    local = env.get("THEMIS_AGENT_TLS_TRUST", "")
    key, path = (("$THEMIS_AGENT_TLS_TRUST", local) if local else
                 (TRUST_KEY, conf.get(TRUST_KEY, "")) if conf.get(TRUST_KEY, "").strip() else
                 (CERT_KEY, conf.get(CERT_KEY, "")))
    try:
        pem = read_pem(path.strip(), key, b"-----BEGIN CERTIFICATE")
    except TlsError as e:
        raise ClientError(f"the agents' endpoint serves TLS ({ENABLED_KEY} is not false) and "
                          f"the AM needs the CA certificate: {e}; copy it to this host and "
                          "point $THEMIS_AGENT_TLS_TRUST at it") from None
    return {ARBITER_TLS_ENV: "on", ARBITER_CA_ENV: base64.b64encode(pem).decode()}


def _hdfs_authority(conf: dict[str, str]) -> str:
    fs = conf.get("fs.defaultFS", "hdfs://127.0.0.1:9000")
    return fs.split("://", 1)[-1].rstrip("/") if fs.startswith("hdfs://") else "127.0.0.1:9000"


def find_am_jar() -> Path:
    """``$THEMIS_AM_JAR``, else the copy shipped in the installed package
    (``themis/submarine_am/lib/``), else a source checkout's ``submarine-am/target/``."""
    from themis.hadoop.jars import JarNotFound, find_jar

    try:
        return find_jar("AM jar", "themis-submarine-am-*.jar", "THEMIS_AM_JAR",
                        "submarine_am/lib", "submarine-am")
    except JarNotFound as e:
        raise ClientError(str(e)) from None
