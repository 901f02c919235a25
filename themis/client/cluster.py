"""The Submarine-style client: submit an app (spec + AM jar to HDFS, then the YARN REST API),
show its status (RM REST + the AM's JSON status through the RM's web proxy; the Themis
plugin's leases from the RM's ``/jmx``) and kill it.

Everything goes over HTTP (no Hadoop client jars on the user's machine): the RM REST API
(``/ws/v1/cluster/apps/new-application``, ``POST /ws/v1/cluster/apps``), the RM's
``/conf`` (its effective yarn-site.xml: classpath, Themis agent port, f, lease) and WebHDFS,
all as one user (:mod:`themis.identity.http`: the login name on a pseudo-auth cluster, the
Kerberos ticket's principal on a secure one). On a secure cluster a submission carries the
user's HDFS and RM delegation tokens, renewed by the RM for the app's life, so that the AM,
the job runners and TensorBoard reach HDFS and the RM as that user (docs/install.md,
"Security and Kerberos").
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import posixpath
import socket
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from themis.agent.endpoints import agent_addresses, from_mapping
from themis.am.spec import AppSpec
from themis.client.labels import (
    cluster_labels,
    label_refusal,
    queue_default_label,
    queue_labels,
)
from themis.hadoop.dockerrt import MAX_CONF_BYTES, DaemonConfError, read_conf
from themis.hadoop.webhdfs import WebHdfs, WebHdfsError
from themis.identity.http import HadoopSession, login_user
from themis.identity.tokens import HDFS_KIND, Token, TokenError

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
    """One user's view of a cluster. ``user`` names the user of pseudo authentication
    (default ``$HADOOP_USER_NAME``, else the login name); with Kerberos the ticket in the
    user's cache decides, and ``user`` is read back from the NameNode (:meth:`whoami`)."""

    rm_url: str = "http://127.0.0.1:8088"
    webhdfs_url: str = "http://127.0.0.1:9870"
    user: str = field(default_factory=login_user)
    session: HadoopSession = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.session = HadoopSession(user=self.user)
        self._home: str | None = None

    @classmethod
    def from_env(cls, rm: str | None = None, webhdfs: str | None = None,
                 user: str | None = None) -> Cluster:
        return cls(rm or os.environ.get("THEMIS_RM_URL", "http://127.0.0.1:8088"),
                   webhdfs or os.environ.get("THEMIS_WEBHDFS_URL", "http://127.0.0.1:9870"),
                   user or login_user())

    # ------------------------------------------------------------------ HTTP
    def _req(self, method: str, path: str, body: Any = None, timeout: float = 15.0) -> Any:
        """A JSON call to the RM (or to ``path`` when it is a URL) as this user; a refusal
        or an unreachable RM is a ClientError naming the call (AuthError passes through:
        no or an expired Kerberos ticket)."""
        url = path if path.startswith("http") else f"{self.rm_url}{path}"
        data = json.dumps(body).encode() if body is not None else None
        try:
            r = self.session.request(method, url, data=data, timeout=timeout, headers={
                "Content-Type": "application/json", "Accept": "application/json"})
        except requests.RequestException as e:
            raise ClientError(f"{method} {url}: {e}") from None
        if r.status_code >= 400:
            raise ClientError(f"{method} {url}: HTTP {r.status_code}: {_refusal(r)}")
        try:
            return r.json() if r.content else None
        except ValueError:
            raise ClientError(f"{method} {url}: not JSON: {r.text[:200]!r}") from None

    def hdfs(self) -> WebHdfs:
        return WebHdfs(self.webhdfs_url, session=self.session)

    def whoami(self) -> str:
        """The user the cluster sees: the last part of the home directory the NameNode
        names for this session (the ticket's principal after auth_to_local, or ``user``)."""
        self.user = self.home().rstrip("/").rsplit("/", 1)[-1] or self.user
        return self.user

    def home(self) -> str:
        if self._home is None:
            try:
                self._home = self.hdfs().home()
            except WebHdfsError as e:
                raise ClientError(str(e)) from None
        return self._home

    def _fetch(self, url: str, timeout: float) -> bytes:
        try:
            r = self.session.get(url, timeout=timeout, stream=True)
            raw = r.raw.read(MAX_CONF_BYTES + 1, decode_content=True)
        except requests.RequestException as e:
            raise OSError(str(e)) from None
        if r.status_code >= 400:
            raise OSError(f"HTTP {r.status_code}: {_refusal(r)}")
        return bytes(raw)

    def rm_conf(self) -> dict[str, str]:
        """The RM's effective configuration (``/conf``, XML)."""
        try:
            return read_conf(f"{self.rm_url}/conf", fetch=self._fetch)
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

    def app_dir(self, app_id: str, owner: str | None = None) -> str:
        """Where an app keeps its files in HDFS: ``/user/<owner>/.themis/<app>``, the
        owner being this client's user unless given."""
        return f"/user/{owner or self.user}/.themis/{app_id}"

    # ------------------------------------------------------------------ submit
    def submit(self, spec: AppSpec, am_jar: Path, *, python: str = "") -> str:
        """Upload and submit; ``python`` runs the AM's Python side and the jobs' runners
        (default: the cluster's ``yarn.resourcemanager.themis.python-executable``, else
        ``python3``). Its directory is put first on the job containers' PATH."""
        conf = self.rm_conf()
        python = python or conf.get(PYTHON_KEY, "") or "python3"
        secure = is_secure(conf)
        self.whoami()
        label = self.node_label_for(spec.node_label, spec.queue)
        new = self._req("POST", "/ws/v1/cluster/apps/new-application")
        app_id = str(new["application-id"])
        d = self.app_dir(app_id)
        fs = self.hdfs()
        try:
            # the app's files are the user's alone (the AM and its containers read them
            # as the user: docs/install.md, "Security and Kerberos")
            fs.mkdirs(posixpath.dirname(d), permission="700")
            fs.mkdirs(d, permission="700")
            fs.write(f"{d}/spec.json", spec.to_json().encode(), permission="600")
            fs.write(f"{d}/am.jar", am_jar.read_bytes(), permission="600")
            st = fs.status(f"{d}/am.jar")
        except WebHdfsError as e:
            raise ClientError(f"cannot stage the app in HDFS as {self.user}: {e}") from None
        assert st is not None
        credentials = self.delegation_tokens(conf) if secure else {}
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
            "PYTHONUNBUFFERED": "1",
            **agent_tls_env(conf),
        }
        if not secure:  # pseudo auth: the AM and its runners name the user
            env["HADOOP_USER_NAME"] = self.user
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
                **({"credentials": {"tokens": {"entry": [
                    {"key": k, "value": v} for k, v in credentials.items()]},
                    "secrets": {"entry": []}}} if credentials else {}),
            },
            "resource": {"memory": spec.am.memory_mb, "vCores": spec.am.vcores},
            # the app's partition: YARN applies it to every ask of the app, its AM's too
            **({"app-node-label-expression": label} if label else {}),
        }
        try:
            self._req("POST", "/ws/v1/cluster/apps", body)
        except ClientError:
            with contextlib.suppress(WebHdfsError):  # refused: leave nothing staged behind
                fs.delete(d, recursive=True)
            raise
        return app_id

    def node_label_for(self, label: str, queue: str) -> str:
        """The node label an app of ``queue`` is submitted with: ``label``, or without one the
        queue's ``default-node-label-expression`` ("" for none). ClientError when the cluster
        lacks the label or the queue may not use it (:mod:`themis.client.labels`); what the
        RM does not publish is not checked."""
        try:
            scheduler = self._req("GET", "/ws/v1/cluster/scheduler")
        except ClientError:
            scheduler = None  # (not published here: YARN's own check applies)
        if not label:
            return queue_default_label(scheduler, queue)
        try:
            known = cluster_labels(self._req("GET", "/ws/v1/cluster/get-node-labels"))
        except ClientError:
            known = None
        why = label_refusal(label, queue, known, queue_labels(scheduler, queue))
        if why:
            raise ClientError(why)
        return label

    def delegation_tokens(self, conf: Mapping[str, str]) -> dict[str, str]:
        """The tokens a submission carries on a secure cluster, by alias (URL strings), each
        renewable by the RM, which renews them for the app's life and cancels them after:
        the user's HDFS token (kind ``HDFS_DELEGATION_TOKEN``: the NodeManager localizes the
        AM jar over ``hdfs://`` with it; the containers use it for WebHDFS) and an RM token
        for the AM's client calls (its node list), with the RM's client address as service."""
        renewer = rm_principal(conf, self.rm_url)
        if not renewer:
            raise ClientError("the cluster runs Kerberos but its /conf names no "
                              "yarn.resourcemanager.principal: the RM could not renew the "
                              "app's tokens")
        try:
            web = Token.from_url_string(self.hdfs().delegation_token(renewer))
            rm_doc = self._req("POST", "/ws/v1/cluster/delegation-token",
                               {"renewer": renewer}) or {}
            rm = Token.from_url_string(str(rm_doc["token"]))
        except WebHdfsError as e:
            raise ClientError(f"cannot get an HDFS delegation token: {e}") from None
        except (KeyError, TokenError) as e:
            raise ClientError(f"the RM's delegation token: unexpected answer: {e}") from None
        return {
            "themis-hdfs": web.with_kind(HDFS_KIND, web.service).to_url_string(),
            "themis-rm": rm.with_kind(rm.kind, rm_token_service(conf, self.rm_url))
            .to_url_string(),
        }

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

    def am_status(self, app_id: str, owner: str | None = None) -> dict[str, Any] | None:
        """The AM's JSON status: through the RM's web proxy, else at the address the AM
        published in HDFS; after the app ended, its final ``result.json`` (in the HDFS
        home of ``owner``, default this client's user: readable only by the owner)."""
        for url in (f"{self.rm_url}/proxy/{app_id}/status", self._published(app_id, owner)):
            if not url:
                continue
            try:
                doc = self._req("GET", url, timeout=5)
                if isinstance(doc, dict) and doc.get("app_id") == app_id:
                    return doc
            except (ClientError, ValueError):
                continue
        try:
            raw = self.hdfs().read_or_none(f"{self.app_dir(app_id, owner)}/result.json")
        except Exception:
            return None
        if raw:
            status = json.loads(raw).get("status")
            return dict(status) if isinstance(status, dict) else None
        return None

    def _published(self, app_id: str, owner: str | None) -> str:
        try:
            raw = self.hdfs().read_or_none(f"{self.app_dir(app_id, owner)}/am.json")
        except Exception:
            return ""
        if not raw:
            return ""
        url = str(json.loads(raw).get("tracking_url", ""))
        return url.rstrip("/") + "/status" if url else ""

    def kill(self, app_id: str) -> str:
        try:
            doc = self._req("PUT", f"/ws/v1/cluster/apps/{app_id}/state", {"state": "KILLED"})
        except ClientError as e:
            if "HTTP 403" in str(e) or "HTTP 401" in str(e):
                raise ClientError(
                    f"{e} - YARN's MODIFY_APP ACL: only the app's owner, the users of its "
                    "modify ACL and yarn.admin.acl may kill it") from None
            raise
        return str((doc or {}).get("state", ""))


def _refusal(r: requests.Response) -> str:
    """The reason a Hadoop daemon gave for an HTTP error: the RemoteException's message when
    there is one (an ACL refusal names the ACL and the user there), else the body's start."""
    try:
        doc = r.json()
        exc = doc.get("RemoteException") if isinstance(doc, dict) else None
        if isinstance(exc, dict) and exc.get("message"):
            return f"{exc.get('exception', 'RemoteException')}: {exc['message']}"[:500]
    except ValueError:
        pass
    return r.text[:500]


def is_secure(conf: Mapping[str, str]) -> bool:
    return conf.get("hadoop.security.authentication", "simple").strip().lower() == "kerberos"


def rm_principal(conf: Mapping[str, str], rm_url: str) -> str:
    """The RM's Kerberos principal with ``_HOST`` replaced by its host name (the renewer of
    the app's tokens); "" when the configuration names none."""
    p = conf.get("yarn.resourcemanager.principal", "").strip()
    host = (conf.get("yarn.resourcemanager.hostname", "").strip()
            or urllib.parse.urlsplit(rm_url).hostname or "")
    return p.replace("_HOST", host.lower()) if p else ""


def rm_token_service(conf: Mapping[str, str], rm_url: str) -> str:
    """The service of an RM delegation token: the RM's client address(es) as ``ip:port``,
    as Hadoop's ClientRMProxy selects the token. A host this machine cannot resolve (a
    cluster-internal name) is replaced by the host the client reached the RM at."""
    ids = [i.strip() for i in conf.get("yarn.resourcemanager.ha.rm-ids", "").split(",")
           if i.strip()] if conf.get("yarn.resourcemanager.ha.enabled") == "true" else []
    here = urllib.parse.urlsplit(rm_url).hostname or "127.0.0.1"
    out = []
    for suffix in [f".{i}" for i in ids] or [""]:
        host = conf.get(f"yarn.resourcemanager.hostname{suffix}", "") or here
        addr = conf.get(f"yarn.resourcemanager.address{suffix}", "") or f"{host}:8032"
        host, _, port = addr.rpartition(":")
        try:
            ip = socket.gethostbyname(host)
        except OSError:
            ip = socket.gethostbyname(here)
        out.append(f"{ip}:{port or 8032}")
    return ",".join(out)


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
