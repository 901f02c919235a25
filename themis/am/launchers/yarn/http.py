"""The YARN AM's HTTP server: ``GET /`` (= ``/status``) answers the app's JSON status,
``POST /api/report`` takes the job runners' reports (docs/yarn.md, "Security"; docs/am.md,
"Progress"), from any NodeManager host, on the hosts of :func:`http_hosts`."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from themis.am.launchers.yarn.report import (
    REPORT_READ_TIMEOUT_S,
    ReportRefused,
    content_length,
    parse_report,
)
from themis.hadoop.security import REPORT_CONTAINER_HEADER, REPORT_TOKEN_HEADER

if TYPE_CHECKING:
    from themis.am.launchers.yarn.am import AppMaster

log = logging.getLogger("themis.am.launchers.yarn.am")


def start_http(am: AppMaster) -> tuple[ThreadingHTTPServer, str]:
    """Serve ``am``'s status and report endpoints in a daemon thread; (server, tracking URL).
    Sets ``am.http_host`` (the advertised host)."""

    class Handler(BaseHTTPRequestHandler):
        timeout = REPORT_READ_TIMEOUT_S

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("http: " + fmt, *args)

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.split("?")[0].rstrip("/") in ("", "/status", "/ws/v1/status"):
                with am._lock:
                    self._send(200, am._status)
            else:
                self._send(404, {"error": f"no such path {self.path}"})

        def do_POST(self) -> None:
            """A runner's report (themis.am.launchers.yarn.report): its container's token
            before its body, a bounded body, a checked shape; a refused report changes
            nothing."""
            if self.path != "/api/report":
                self.close_connection = True  # the body is not read
                self._send(404, {"error": f"no such path {self.path}"})
                return
            container = self.headers.get(REPORT_CONTAINER_HEADER)
            try:
                refused = am.report_tokens.check(container,
                                                 self.headers.get(REPORT_TOKEN_HEADER))
                if refused is not None:
                    raise ReportRefused(*refused)
                n = content_length(self.headers.get("Content-Length"))
                data = self.rfile.read(n)
                if len(data) != n:
                    raise ReportRefused(400, f"body of {len(data)} bytes, Content-Length "
                                             f"says {n}")
                body = parse_report(data, str(container))  # a str: checked above
            except ReportRefused as e:
                self.close_connection = True  # the body may be unread
                self._send(e.status, {"error": e.message})
                return
            except OSError as e:  # the client went away or stalled (timeout)
                log.debug("report from %s: %s", container, e)
                self.close_connection = True
                return
            am._reports.put(body)
            self._send(200, am.launcher.answer(body))

    bind, am.http_host = http_hosts(os.environ)
    server = ThreadingHTTPServer((bind, 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="am-http", daemon=True).start()
    port = server.server_address[1]
    return server, f"http://{url_host(am.http_host)}:{port}/"


# ------------------------------------------------------------------------- addresses
def http_hosts(env: Mapping[str, str]) -> tuple[str, str]:
    """(bind host, advertised host) of the AM's HTTP server. Advertised (tracking URL, host
    registered with the RM, the runners' ``--am``): ``THEMIS_AM_HOST``, else ``NM_HOST`` (the
    NodeManager's host name, which YARN puts in every container's environment), else
    127.0.0.1 (outside YARN). Bind: ``THEMIS_AM_BIND_HOST`` (e.g. 0.0.0.0), else the
    advertised host: job runners on other NodeManagers reach it there."""
    advertised = env.get("THEMIS_AM_HOST") or env.get("NM_HOST") or "127.0.0.1"
    return env.get("THEMIS_AM_BIND_HOST") or advertised, advertised


def url_host(host: str) -> str:
    """``host`` for a URL (IPv6 addresses in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
