"""Who Themis is towards Hadoop (themis.identity): Hadoop's token encodings, read from files
Hadoop itself wrote, and the HTTP session's three identities (user name, Kerberos, token).

tests/unit/data/hadoop-credentials.{writable,protobuf} were written by Hadoop 3.5.0's
``Credentials.writeTokenStorageToStream`` (WRITABLE and PROTOBUF formats) with two tokens -
``themis-hdfs`` (HDFS_DELEGATION_TOKEN, service 172.31.0.2:9000, a 200-byte identifier
0..199, password "secret-password") and ``amrm`` (YARN_AM_RM_TOKEN) - and one secret key;
HADOOP_URL below is that HDFS token's ``Token.encodeToUrlString()``.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from themis.identity.http import AuthError, HadoopSession, container_session, login_user
from themis.identity.tokens import (
    HDFS_KIND,
    Token,
    TokenError,
    container_tokens,
    read_credentials,
    webhdfs_token,
)

DATA = Path(__file__).parent / "data"
HADOOP_URL = (
    "j8gAAQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4_"
    "QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9gYWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1-f4C"
    "BgoOEhYaHiImKi4yNjo-QkZKTlJWWl5iZmpucnZ6foKGio6SlpqeoqaqrrK2ur7CxsrO0tba3uLm6u7y9vr_AwcL"
    "DxMXGxw9zZWNyZXQtcGFzc3dvcmQVSERGU19ERUxFR0FUSU9OX1RPS0VODzE3Mi4zMS4wLjI6OTAwMA")
HDFS = Token(bytes(range(200)), b"secret-password", HDFS_KIND, "172.31.0.2:9000")


# ----------------------------------------------------------------------------- tokens
def test_a_token_string_hadoop_wrote_decodes_and_encodes_back_byte_for_byte() -> None:
    assert Token.from_url_string(HADOOP_URL) == HDFS
    assert HDFS.to_url_string() == HADOOP_URL


@pytest.mark.parametrize("fmt", ["writable", "protobuf"])
def test_credentials_files_hadoop_wrote_give_their_tokens(fmt: str) -> None:
    tokens = read_credentials(DATA / f"hadoop-credentials.{fmt}")
    assert tokens["themis-hdfs"] == HDFS
    assert tokens["amrm"].kind == "YARN_AM_RM_TOKEN"
    assert set(tokens) == {"themis-hdfs", "amrm"}  # the secret key is not a token


@given(st.binary(max_size=700), st.binary(max_size=300), st.text(max_size=40),
       st.text(max_size=60))
def test_any_token_survives_the_url_string(ident: bytes, pw: bytes, kind: str,
                                           service: str) -> None:
    t = Token(ident, pw, kind, service)
    assert Token.from_url_string(t.to_url_string()) == t


def test_kind_and_service_change_and_identity_stays() -> None:
    t = HDFS.with_kind("RM_DELEGATION_TOKEN", "10.0.0.1:8032")
    assert (t.identifier, t.password) == (HDFS.identifier, HDFS.password)
    assert (t.kind, t.service) == ("RM_DELEGATION_TOKEN", "10.0.0.1:8032")


@pytest.mark.parametrize("text", ["", "%%%", HADOOP_URL[:40], HADOOP_URL + "AAAA"])
def test_a_broken_token_string_is_refused_with_a_reason(text: str) -> None:
    with pytest.raises(TokenError):
        Token.from_url_string(text)


def test_a_file_that_is_not_token_storage_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "c"
    bad.write_bytes(b"NOPE\x00")
    with pytest.raises(TokenError, match="magic HDTS"):
        read_credentials(bad)
    bad.write_bytes(b"HDTS\x07")
    with pytest.raises(TokenError, match="unknown format version 7"):
        read_credentials(bad)
    bad.write_bytes((DATA / "hadoop-credentials.writable").read_bytes()[:60])
    with pytest.raises(TokenError, match="truncated"):
        read_credentials(bad)


def test_a_container_uses_its_hdfs_token_and_never_the_amrm_token() -> None:
    env = {"HADOOP_TOKEN_FILE_LOCATION": str(DATA / "hadoop-credentials.writable")}
    assert webhdfs_token(container_tokens(env)) == HADOOP_URL
    assert container_session(env).delegation == HADOOP_URL
    plain = container_session({"HADOOP_USER_NAME": "alice"})
    assert (plain.delegation, plain.user) == (None, "alice")
    assert container_tokens({}) == {}
    assert webhdfs_token({"x": Token(b"a", b"b", "YARN_AM_RM_TOKEN", "")}) is None


# ----------------------------------------------------------------------------- HTTP
class _Server:
    """A loopback endpoint that records each request's query and answers as told:
    ``negotiate`` makes it ask for SPNEGO (401 + WWW-Authenticate: Negotiate) unless the
    request carries a Negotiate header."""

    def __init__(self, negotiate: bool) -> None:
        self.queries: list[dict[str, list[str]]] = []
        self.negotiate = negotiate
        srv = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                srv.queries.append(parse_qs(urlparse(self.path).query))
                if srv.negotiate and "Negotiate" not in self.headers.get("Authorization", ""):
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", "Negotiate")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = b'{"clusterInfo": {}, "Path": "/user/x"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_PUT = do_POST = do_GET

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def simple() -> Iterator[_Server]:
    s = _Server(negotiate=False)
    yield s
    s.close()


@pytest.fixture
def kerberized(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    # an empty credentials cache of our own: whatever tickets this machine has, none here
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'no-ticket'}")
    s = _Server(negotiate=True)
    yield s
    s.close()


def test_pseudo_auth_names_the_login_user_never_root_by_default(
        simple: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)
    monkeypatch.setattr("getpass.getuser", lambda: "alice")
    assert login_user() == "alice"
    HadoopSession(user=login_user()).get(f"{simple.url}/ws/v1/cluster/info", timeout=5)
    assert simple.queries[-1]["user.name"] == ["alice"]
    monkeypatch.setenv("HADOOP_USER_NAME", "bob")
    assert login_user() == "bob"


def test_a_delegation_token_replaces_the_user_name(simple: _Server) -> None:
    HadoopSession(user="alice", delegation="TOKEN").get(f"{simple.url}/webhdfs/v1/", timeout=5)
    assert simple.queries[-1]["delegation"] == ["TOKEN"]
    assert "user.name" not in simple.queries[-1]


def test_kerberos_without_a_ticket_is_one_line_that_says_kinit(kerberized: _Server) -> None:
    pytest.importorskip("requests_gssapi")
    s = HadoopSession(user="alice")
    with pytest.raises(AuthError) as e:
        s.get(f"{kerberized.url}/ws/v1/cluster/info", timeout=5)
    msg = str(e.value)
    assert "\n" not in msg and msg.endswith("run kinit") and kerberized.url in msg
    assert s.uses_kerberos(kerberized.url)
    assert "user.name" in kerberized.queries[0]  # asked as the user first, then Negotiate


def test_every_client_command_ends_with_the_kinit_line_and_exit_2(kerberized: _Server) -> None:
    pytest.importorskip("requests_gssapi")
    for args in (["status"], ["kill", "application_1_0001"],
                 ["logs", "application_1_0001", "--tensorboard"]):
        flags = (["--webhdfs", kerberized.url] if args[0] == "logs"
                 else ["--rm", kerberized.url, "--webhdfs", kerberized.url])
        p = subprocess.run([sys.executable, "-m", "themis", *args, *flags],
                           capture_output=True, text=True, timeout=60)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2, (args, p.stderr)
        assert len(lines) == 1 and lines[0].endswith("run kinit"), (args, p.stderr)
