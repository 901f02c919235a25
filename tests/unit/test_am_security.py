"""The YARN application master's credentials (docs/yarn.md, "Security"): per-container tokens
of its ``/api/report`` endpoint (a real HTTP server on 127.0.0.1 and the real runner's
report call), the TLS settings ``themis submit`` hands the AM, and the AM's agent options."""

from __future__ import annotations

import base64
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit._tls import self_signed
from tests.unit.test_submarine_am import FakeShell, _spec
from themis.am.launchers.yarn.am import AppMaster
from themis.am.launchers.yarn.records import Run
from themis.am.launchers.yarn.runner import Runner
from themis.client.cluster import ClientError, agent_tls_env
from themis.hadoop.security import (
    ARBITER_CA_ENV,
    ARBITER_TLS_ENV,
    REPORT_CONTAINER_HEADER,
    REPORT_TOKEN_ENV,
    REPORT_TOKEN_HEADER,
    agent_options,
    agent_tls,
)
from themis.rpc.tls import CERT_KEY, ENABLED_KEY, TRUST_KEY

CONTAINER = "container_1700000000000_0009_01_000002"
OTHER = "container_1700000000000_0009_01_000003"


@pytest.fixture
def am() -> Iterator[AppMaster]:
    a = AppMaster(_spec(), "application_1700000000000_0009", FakeShell(), arbiter="-",
                  hdfs=None, app_dir="/tmp/z")
    a.start_http()
    yield a
    if a._http is not None:
        a._http.shutdown()


def post(am: AppMaster, body: Any, token: str | None,
         container: str | None = CONTAINER) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers[REPORT_TOKEN_HEADER] = token
    if container is not None:
        headers[REPORT_CONTAINER_HEADER] = container
    req = urllib.request.Request(f"{am.tracking_url}api/report", method="POST",
                                 data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def state(am: AppMaster) -> tuple[int, set[str], bool]:
    return am._reports.qsize(), set(am._stop_set), am._dirty


@pytest.mark.parametrize("case", ["missing", "empty", "wrong", "other container's",
                                  "no container", "oversized"])
def test_report_without_its_containers_token_is_refused_and_changes_nothing(
        am: AppMaster, case: str) -> None:
    am._stop_set.add(CONTAINER)
    body: dict[str, Any] = {"container": CONTAINER, "job_id": "j0", "final": True,
                            "events": [{"event": "exit", "code": 0}]}
    token: str | None = {
        "missing": None, "empty": "", "wrong": "0" * 64,
        "other container's": am.report_tokens.token_for(OTHER),
        "no container": am.report_tokens.token_for(CONTAINER),
        "oversized": "a" * 10_000}[case]
    before = state(am)
    code, answer = post(am, body, token, None if case == "no container" else CONTAINER)
    assert code == (401 if case in ("missing", "empty") else 403), answer
    assert "stop" not in answer and answer["error"]
    assert state(am) == before


def raw_post(am: AppMaster, head: dict[str, str], body: bytes, *,
             token: str | None = "", shut: bool = False) -> tuple[int, str]:
    """POST ``body`` with exactly the headers ``head`` (plus the container's token unless
    ``token`` is None): Content-Length is what ``head`` says, or absent. ``shut``: close the
    sending side after the body (a body shorter than its Content-Length)."""
    host, port = am.tracking_url.split("//")[1].rstrip("/").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        lines = ["POST /api/report HTTP/1.1", f"Host: {host}",
                 f"{REPORT_CONTAINER_HEADER}: {CONTAINER}"]
        if token is not None:
            lines.append(f"{REPORT_TOKEN_HEADER}: "
                         f"{token or am.report_tokens.token_for(CONTAINER)}")
        lines += [f"{k}: {v}" for k, v in head.items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        if shut:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]


REPORT = {"container": CONTAINER, "job_id": "j0", "final": True,
          "events": [{"event": "exit", "step": 5}]}


def nested(levels: int) -> bytes:
    return b'{"container": "%s", "events": ' % CONTAINER.encode() + \
        b"[" * levels + b"]" * levels + b"}"


@pytest.mark.parametrize("case, head, body, shut, code, why", [
    ("nested 10,000 levels", {}, nested(10_000), False, 400, "nesting deeper"),
    ("not UTF-8", {}, b'{"job_id": "\xff\xfe"}', False, 400, "not UTF-8"),
    ("not JSON", {}, b"{", False, 400, "not valid JSON"),
    ("a 10,000-digit number", {}, b'{"steps": ' + b"9" * 10_000 + b"}", False, 400,
     "steps: integer"),
    ("duplicate key", {}, b'{"steps": 1, "steps": 2}', False, 400, "duplicate key"),
    ("not an object", {}, b"[1]", False, 400, "a JSON object"),
    ("an event that is not an object", {}, b'{"events": [1]}', False, 400, "events[0]"),
    ("a step that is not a number", {}, b'{"events": [{"event": "start", "step": "x"}]}',
     False, 400, "events[0].step"),
    ("steps not an integer", {}, b'{"steps": "many"}', False, 400, "steps"),
    ("another container in the body", {}, b'{"container": "container_x"}', False, 400,
     "container"),
    ("oversize (declared 2 MiB, 10 bytes sent)", {"Content-Length": str(2 << 20)},
     b"{" * 10, False, 413, "exceeds the limit"),
    ("no Content-Length", {"Content-Length": None}, b"{}", True, 411, "Content-Length"),
    ("Content-Length not a number", {"Content-Length": "12abc"}, b"{}", False, 400,
     "not a byte count"),
    ("negative Content-Length", {"Content-Length": "-1"}, b"{}", False, 400,
     "not a byte count"),
    ("body shorter than its Content-Length", {"Content-Length": "100"}, b"{}", True, 400,
     "body of 2 bytes"),
])
def test_bad_report_bodies_are_refused_and_change_nothing(
        am: AppMaster, case: str, head: dict[str, str | None], body: bytes, shut: bool,
        code: int, why: str) -> None:
    am._stop_set.add(CONTAINER)
    head = {"Content-Length": str(len(body)), **head}
    before = state(am)
    status, error = raw_post(am, {k: v for k, v in head.items() if v is not None}, body,
                             shut=shut)
    assert (status, why in error) == (code, True), error
    assert state(am) == before
    assert post(am, REPORT, am.report_tokens.token_for(CONTAINER)) == (200, {"stop": True})


def test_token_is_checked_before_the_body_is_read(am: AppMaster) -> None:
    """No token and a body that would be refused (too large, too deep): 401, not 413/400."""
    before = state(am)
    for head, body in (({"Content-Length": str(2 << 20)}, b"{"),
                       ({"Content-Length": str(len(nested(10_000)))}, nested(10_000))):
        assert raw_post(am, head, body, token=None)[0] == 401
        assert raw_post(am, head, body, token="0" * 64)[0] == 403
    assert state(am) == before


def test_runner_reports_with_its_token(am: AppMaster, monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path) -> None:
    monkeypatch.setenv("CONTAINER_ID", CONTAINER)
    monkeypatch.setenv(REPORT_TOKEN_ENV, am.report_tokens.token_for(CONTAINER))
    am._stop_set.add(CONTAINER)
    r = Runner(am.tracking_url, "j0", 1, tmp_path, ["true"])
    assert r.report() is True  # accepted: the AM answers "stop" for this container
    assert am._reports.get_nowait()["container"] == CONTAINER
    monkeypatch.setenv(REPORT_TOKEN_ENV, am.report_tokens.token_for(OTHER))
    assert Runner(am.tracking_url, "j0", 1, tmp_path, ["true"]).report() is False
    assert am._reports.empty()


def test_runner_keeps_its_reports_under_the_limit(am: AppMaster,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """Events piled up past the AM's limit (an AM unreachable for long, a job printing huge
    lines): the runner sends the newest ones that fit rather than a report refused forever."""
    monkeypatch.setenv("CONTAINER_ID", CONTAINER)
    monkeypatch.setenv(REPORT_TOKEN_ENV, am.report_tokens.token_for(CONTAINER))
    r = Runner(am.tracking_url, "j0", 1, tmp_path, ["true"])
    for i in range(3000):
        r._add_event({"event": "note", "i": i, "text": "x" * 1000})
    r.report()
    sent = am._reports.get_nowait()["events"]
    assert 0 < len(sent) < 3000 and sent[-1]["i"] == 2999
    assert not r._events


def test_launch_hands_each_container_its_token() -> None:
    shell = FakeShell()
    a = AppMaster(_spec(), "application_1700000000000_0009", shell, arbiter="-", hdfs=None,
                  app_dir="/tmp/z")
    a.tracking_url = "http://127.0.0.1:1/"
    jid = a.hb._start_bracket()[0]
    envs = [a._command_for(Run(run_id=1, job_id=jid, node="nm1:8041", host="nm1", gpus=1,
                               request_id=1, container=container))[1]
            for container in (CONTAINER, OTHER)]  # the launcher launches with this env
    tokens = [env[REPORT_TOKEN_ENV] for env in envs]
    assert tokens == [a.report_tokens.token_for(CONTAINER), a.report_tokens.token_for(OTHER)]
    assert tokens[0] != tokens[1]


# ---------------------------------------------------------------- TLS settings of the AM
def test_submit_passes_the_ca_or_an_explicit_off(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    assert agent_tls_env({ENABLED_KEY: "false"}, {}) == {ARBITER_TLS_ENV: "off"}
    env = agent_tls_env({CERT_KEY: str(cert)}, {})  # TLS on by default; trust = the cert
    assert env[ARBITER_TLS_ENV] == "on"
    assert base64.b64decode(env[ARBITER_CA_ENV]) == cert.read_bytes()
    assert agent_options(env, object())["tls"] is not None
    # the trust file wins over the cert file; $THEMIS_AGENT_TLS_TRUST over both
    assert agent_tls_env({CERT_KEY: "/nope", TRUST_KEY: str(cert)}, {})[ARBITER_TLS_ENV] == "on"
    assert agent_tls_env({TRUST_KEY: "/nope"}, {"THEMIS_AGENT_TLS_TRUST": str(cert)})
    with pytest.raises(ClientError) as info:
        agent_tls_env({CERT_KEY: str(tmp_path / "gone.crt")}, {})
    assert CERT_KEY in str(info.value) and "gone.crt" in str(info.value)
    with pytest.raises(ClientError) as info:
        agent_tls_env({}, {})
    assert "THEMIS_AGENT_TLS_TRUST" in str(info.value)


@pytest.mark.parametrize("env, why", [
    ({}, "is empty"),
    ({ARBITER_CA_ENV: "%%%"}, "not base64"),
    ({ARBITER_CA_ENV: base64.b64encode(b"hello").decode()}, "not a PEM"),
    ({ARBITER_TLS_ENV: "maybe"}, "must be on or off"),
])
def test_am_without_a_usable_ca_says_why(env: dict[str, str], why: str) -> None:
    with pytest.raises(ValueError) as info:
        agent_tls(env)
    assert why in str(info.value)


def test_agent_options_ask_the_shell_for_the_token_each_time() -> None:
    class Shell:
        n = 0

        def amRmToken(self) -> str:
            self.n += 1
            return f"token-{self.n}"

    opts = agent_options({ARBITER_TLS_ENV: "off"}, Shell())
    assert opts["tls"] is None
    assert opts["registration_token"]() == "token-1"
    assert opts["registration_token"]() == "token-2"
