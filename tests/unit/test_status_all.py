"""``themis status --all``: every app that holds or asks GPUs, Themis or not, with its leases
(GPUs, node, expiry) and its wait reason, from the RM's REST API and the Themis plugin's
status bean in the RM's ``/jmx``. The RM here is a fake HTTP server serving what a real one
serves (the bean's JSON as ``ThemisStatus.getStatusJson`` writes it; the real RM is read by
``StockAppsIT`` in rm-plugin and by the docker test ``test_stock_apps.py``)."""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from themis.cli import main

from ._http import serving

NOW = int(time.time() * 1000)
THEMIS_APP = {"id": "application_1_0001", "name": "hb", "state": "RUNNING",
              "finalStatus": "UNDEFINED", "applicationType": "THEMIS"}
MR_APP = {"id": "application_1_0002", "name": "QuasiMonteCarlo", "state": "RUNNING",
          "finalStatus": "UNDEFINED", "applicationType": "MAPREDUCE"}
STOCK_APP = {"id": "application_1_0003", "name": "stock-gpu", "state": "RUNNING",
             "finalStatus": "UNDEFINED", "applicationType": "YARN"}
WAIT = ("Themis: waiting for GPUs: 2 GPUs asked (1 container of 2 GPUs), all 8 GPUs of the "
        "cluster leased or in use; next round at lease expiry in 312 s (12:03:10) or as soon "
        "as GPUs are freed")
STATUS = {
    "now_ms": NOW, "lease_duration_ms": 600000, "grace_period_ms": 30000,
    "stock_app_policy": "hold", "stock_app_max_hold_ms": 3600000, "rounds": 12,
    "nodes": [{"node_id": "nm1:8041", "total_gpus": 4, "grantable_gpus": 0}],
    "leases": [
        {"lease_id": 7, "app_id": "application_1_0001", "node_id": "nm1:8041", "gpus": 4,
         "granted_ms": NOW - 288000, "expiry_ms": NOW + 312000, "state": "ACTIVE"},
    ],
    "apps": [
        {"app_id": "application_1_0001", "agent": True, "asked_gpus": 0, "asks": [],
         "running_gpus": {"nm1:8041": 4}, "reason": "", "diagnostics": ""},
        {"app_id": "application_1_0003", "agent": False, "asked_gpus": 2,
         "asks": [{"gpus_per_container": 2, "containers": 1}], "running_gpus": {},
         "reason": "all-leased", "diagnostics": WAIT},
    ],
}
AM_STATUS = {"app_id": "application_1_0001", "rho": 1.5, "gpus": {"count": 4}, "jobs": []}


#: the bean of a cluster with node labels: nm1 in the exclusive partition "gpu", nm2 in the
#: default partition; the stock app waits in "gpu"
LABELED = {
    **STATUS,
    "nodes": [{"node_id": "nm1:8041", "total_gpus": 4, "grantable_gpus": 0, "partition": "gpu"},
              {"node_id": "nm2:8041", "total_gpus": 2, "grantable_gpus": 2, "partition": ""}],
    "leases": [{**STATUS["leases"][0], "partition": "gpu"}],
    "apps": [{**STATUS["apps"][0], "partition": "gpu"},
             {**STATUS["apps"][1], "partition": "gpu",
              "diagnostics": WAIT.replace("GPUs: ", "GPUs in partition gpu: ", 1)}],
}


class _Rm(BaseHTTPRequestHandler):
    plugin = True
    status: dict[str, Any] = STATUS

    def log_message(self, *args: Any) -> None:
        return None

    def _json(self, doc: Any, code: int = 200) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        q = parse_qs(url.query)
        if url.path == "/jmx":
            assert q["qry"] == ["Hadoop:service=ResourceManager,name=Themis"]
            beans = [{"name": q["qry"][0], "StatusJson": json.dumps(self.status)}] \
                if self.plugin else []
            self._json({"beans": beans})
        elif url.path == "/ws/v1/cluster/apps":
            apps = [THEMIS_APP, MR_APP, STOCK_APP]
            if "applicationTypes" in q:
                apps = [a for a in apps if a["applicationType"] in q["applicationTypes"]]
            self._json({"apps": {"app": apps}})
        elif url.path == f"/proxy/{THEMIS_APP['id']}/status":
            self._json(AM_STATUS)
        else:
            self._json({"error": "not found"}, 404)


@pytest.fixture
def rm() -> Iterator[str]:
    try:
        with serving(_Rm) as url:
            yield url
    finally:
        _Rm.plugin = True
        _Rm.status = STATUS


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_all_lists_every_gpu_app_with_leases_and_why_it_waits(rm: str) -> None:
    code, out, err = _run("status", "--all", "--rm", rm, "--webhdfs", rm)
    assert code == 0, err
    lines = out.splitlines()
    themis = next(i for i, ln in enumerate(lines) if ln.startswith("application_1_0001"))
    assert "rho=1.500" in lines[themis]
    assert lines[themis + 1].startswith("    lease 7: 4 GPUs on nm1:8041 until ")
    assert "(in 312 s) ACTIVE" in lines[themis + 1] or "(in 311 s) ACTIVE" in lines[themis + 1]
    stock = next(i for i, ln in enumerate(lines) if ln.startswith("application_1_0003"))
    assert "YARN agent=no asks=1x2 GPUs running=0 GPUs" in lines[stock]
    assert lines[stock + 1] == f"    {WAIT}"
    # the MapReduce app holds and asks no GPU: not listed
    assert "application_1_0002" not in out


def test_all_json_carries_leases_and_the_plugins_view(rm: str) -> None:
    code, out, err = _run("status", "--all", "--json", "--rm", rm, "--webhdfs", rm)
    assert code == 0, err
    doc = json.loads(out)  # stdout is only JSON
    by_id = {e["app"]["id"]: e for e in doc}
    assert set(by_id) == {"application_1_0001", "application_1_0003"}
    assert by_id["application_1_0001"]["leases"][0]["gpus"] == 4
    assert by_id["application_1_0003"]["app"]["applicationType"] == "YARN"
    assert by_id["application_1_0003"]["gpus"]["reason"] == "all-leased"
    assert by_id["application_1_0003"]["status"] is None


def test_all_without_the_plugin_says_so(rm: str) -> None:
    _Rm.plugin = False
    code, out, err = _run("status", "--all", "--rm", rm, "--webhdfs", rm)
    assert code == 1 and out == ""
    assert "runs no Themis plugin" in err and "ThemisCapacityScheduler" in err
    assert "Traceback" not in err
    # without --all, nothing of the plugin is needed
    code, out, err = _run("status", "--rm", rm, "--webhdfs", rm)
    assert code == 0 and "application_1_0001" in out and "lease" not in out


def test_all_shows_each_partition_of_a_labeled_cluster(rm: str) -> None:
    code, out, _ = _run("status", "--all", "--rm", rm, "--webhdfs", rm)
    assert code == 0 and "partition" not in out  # no labels: nothing about partitions
    _Rm.status = LABELED
    code, out, err = _run("status", "--all", "--rm", rm, "--webhdfs", rm)
    assert code == 0, err
    lines = out.splitlines()
    assert "partition <default>: 2 GPUs on 1 node, 2 grantable, 0 leased; 0 apps asking" in lines
    assert "partition gpu: 4 GPUs on 1 node, 0 grantable, 4 leased; 1 app asking" in lines
    assert any(ln.startswith("    lease 7: 4 GPUs on nm1:8041 (partition gpu) until ")
               for ln in lines), out
    assert any("waiting for GPUs in partition gpu: " in ln for ln in lines), out
