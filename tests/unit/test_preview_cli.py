"""``themis preview`` end to end: from a saved RM response (tests/unit/data/preview-*.json)
and from a fake ResourceManager serving what a real one serves, to report.html,
summary.json and apps.json; every input it cannot use ends in one line naming the problem
and exit status 2."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlparse

import pytest

from themis.cli import main
from themis.preview.cli import configure, parse_time

from ._http import serving

DATA = Path(__file__).parent / "data"
APPS = DATA / "preview-apps.json"
NODES = DATA / "preview-nodes.json"
SCHED = DATA / "preview-scheduler.json"
ROOT = Path(__file__).resolve().parents[2]
T0 = 1764547200000  # 2025-12-01T00:00:00Z
FAIR = "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fair.FairScheduler"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["preview", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_saved_responses_to_report_summary_and_apps(tmp_path: Path) -> None:
    """As a user runs it (a process of its own): stdout is only the summary's JSON."""
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "themis.cli", "preview", "--apps-file", str(APPS),
         "--nodes-file", str(NODES), "--scheduler-file", str(SCHED), "--out", str(out),
         "--json", "--no-progress", "--worst", "3"],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary == json.loads((out / "summary.json").read_text()) | {
        "timings_s": summary["timings_s"]}
    assert "9 apps read" in proc.stderr and "5 replayed" in proc.stderr

    apps = summary["apps"]
    assert (apps["read"], apps["replayed"]) == (9, 5)
    assert apps["left_out"] == {"state": 1, "not_finished": 0, "outside_window": 0,
                                "no_gpu": 3, "no_runtime": 0}
    assert apps["inferred"] == {"gpus": 5}
    assert summary["cluster"]["gpus"] == 8 and summary["cluster"]["nodes"] == 2
    assert summary["current"] == {"scheduler": "capacity", "policy": "fifo",
                                  "source": str(SCHED)}
    assert set(summary["policies"]) == {"fifo", "themis"}
    # GPU work read from resourceSecondsMap: 14400 + 14400 + 4500 + 43200 + 3600 s
    assert summary["observed"]["gpu_time_hours"] == pytest.approx(80100 / 3600)
    # observed JCT: 1 h, 2 h, 0.5 h, 1.5 h, 1 h
    assert summary["observed"]["avg_jct_hours"] == pytest.approx(6.0 / 5)
    for p in summary["policies"].values():
        assert p["apps"] == 5
        # every GPU-second of work is done again, plus restart pauses
        assert p["gpu_time_hours"] >= 80100 / 3600
    cal = summary["calibration"]
    assert cal["policy"] == "fifo" and cal["apps"] == 5
    assert 0 <= cal["median_abs_rel_error"] <= cal["worst_abs_rel_error"]
    assert cal["worst_app"]["id"].startswith("application_1764540000000_")
    assert [len(w) for w in summary["worst_apps"].values()] == [3, 3]
    assert {"replay_fifo", "replay_themis", "parse", "trace", "report"} <= set(
        summary["timings_s"])

    rows = json.loads((out / "apps.json").read_text())
    by_name = {r["name"]: r for r in rows}
    assert set(by_name) == {"old-app", "resnet50-train", "bert-finetune", "gan-sweep",
                            "distributed-train"}
    assert by_name["gan-sweep"]["gpus"] == 3 and by_name["gan-sweep"]["inferred"] == ["gpus"]
    assert by_name["distributed-train"]["gpu_hours"] == 12.0
    assert set(by_name["bert-finetune"]["replay"]) == {"fifo", "themis"}

    page = (out / "report.html").read_text()
    assert page.count("<svg") == 3 and "<style>" in page
    assert "<script" not in page and "<link" not in page and 'src="http' not in page
    for text in ("rho per app under each policy", "fraction of apps (CDF)",
                 "finish-time fairness rho", "Calibration", "distributed-train",
                 "The worst apps", "GPU time (GPU-h)", "avg JCT (h)", "inferred"):
        assert text in page, text


def test_names_from_the_cluster_are_escaped_in_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(APPS.read_text())
    doc["apps"]["app"][0]["name"] = "<script>alert(1)</script>"
    saved = tmp_path / "apps.json"
    saved.write_text(json.dumps(doc))
    code, out, err = _run(capsys, "--apps-file", str(saved), "--gpus", "8", "--out",
                          str(tmp_path / "o"), "--no-progress")
    assert code == 0, err
    assert "fifo " in out and "themis " in out and "report: " in out
    page = (tmp_path / "o" / "report.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # without an RM and without --current: YARN's default scheduler, and it says so
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["current"]["policy"] == "fifo"
    assert summary["current"]["source"].startswith("default")


class _Rm(BaseHTTPRequestHandler):
    """A ResourceManager's REST API: apps, nodes, and a scheduler page that fails (the
    configuration then names the scheduler)."""

    seen: ClassVar[list[dict[str, list[str]]]] = []
    apps_status = 200

    def log_message(self, *args: Any) -> None:
        return None

    def _send(self, body: bytes, code: int = 200, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        q = parse_qs(url.query)
        if url.path == "/ws/v1/cluster/apps":
            _Rm.seen.append(q)
            if self.apps_status != 200:
                self._send(b'{"RemoteException": {"message": "denied"}}', self.apps_status)
                return
            self._send(APPS.read_bytes())
        elif url.path == "/ws/v1/cluster/nodes":
            self._send(NODES.read_bytes())
        elif url.path == "/conf":
            # Hadoop's ConfServlet answers JSON to an Accept header naming JSON
            assert "json" not in self.headers.get("Accept", ""), self.headers
            xml = (f"<configuration><property><name>yarn.resourcemanager.scheduler.class"
                   f"</name><value>{FAIR}</value></property></configuration>")
            self._send(xml.encode(), kind="text/xml")
        else:
            self._send(b"not here", 404, "text/plain")


@pytest.fixture
def rm() -> Iterator[str]:
    try:
        with serving(_Rm) as url:
            yield url
    finally:
        _Rm.seen.clear()
        _Rm.apps_status = 200


def test_from_the_rm_with_a_window(rm: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "--rm", rm, "--since", "2025-12-01", "--until",
                          str(T0 + 86_400_000), "--out", str(tmp_path), "--json",
                          "--no-progress", "--user", "alice")
    assert code == 0, err
    (query,) = _Rm.seen
    assert query["states"] == ["FINISHED,FAILED,KILLED"] and query["user.name"] == ["alice"]
    assert query["startedTimeBegin"] == [str(T0)]
    assert query["startedTimeEnd"] == [str(T0 + 86_400_000 - 1)]
    summary = json.loads(out)
    # the fake RM ignores the window: the preview applies it too (old-app is left out)
    assert summary["apps"]["replayed"] == 4
    assert summary["apps"]["left_out"]["outside_window"] == 1
    assert summary["current"] == {"scheduler": "fair", "policy": "fairshare",
                                  "source": f"{rm}/conf"}
    assert set(summary["policies"]) == {"fairshare", "themis"}
    assert summary["cluster"]["source"] == f"{rm}/ws/v1/cluster/nodes"
    assert summary["source"]["apps"] == f"{rm}/ws/v1/cluster/apps"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_error_line(code: int, out: str, err: str) -> str:
    assert code == 2, (code, err)
    assert out == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("themis preview: error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def test_an_unreachable_rm_is_one_line(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    line = _one_error_line(*_run(capsys, "--rm", url, "--out", str(tmp_path)))
    assert line == (f"themis preview: error: {url}: cannot reach the ResourceManager "
                    "(GET /ws/v1/cluster/apps: Connection refused)")
    assert not (tmp_path / "report.html").exists()


def test_a_refusing_rm_is_one_line(rm: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    _Rm.apps_status = 403
    line = _one_error_line(*_run(capsys, "--rm", rm, "--out", str(tmp_path)))
    assert f"{rm}: GET /ws/v1/cluster/apps: HTTP 403" in line and "denied" in line


def _saved(tmp_path: Path, text: str) -> str:
    p = tmp_path / "apps.json"
    p.write_text(text)
    return str(p)


def test_malformed_truncated_and_empty_inputs_are_one_line_each(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "out")
    full = APPS.read_text()
    app2 = json.loads(full)
    del app2["apps"]["app"][1]["startedTime"]
    cases = {
        "not JSON (line 3 col 5: Expecting value)": '{"apps": {"app": [\n  {"id": "x"},\n'
                                                    '    ]}}',
        "truncated: the JSON ends early (line 205 col 9: Expecting ':' delimiter)": full[:full.index('"id"', 4000) + 4],
        "app 2 (application_1764540000000_0002) has no 'startedTime'": json.dumps(app2),
        "empty (no JSON document)": "",
        'not an RM apps response: expected {"apps": {"app": [...]}}': '{"app": []}',
    }
    for problem, text in cases.items():
        path = _saved(tmp_path, text)
        line = _one_error_line(*_run(capsys, "--apps-file", path, "--gpus", "8", "--out", out))
        assert line.startswith(f"themis preview: error: {path}: "), line
        assert problem in line, (problem, line)
    missing = str(tmp_path / "nope.json")
    line = _one_error_line(*_run(capsys, "--apps-file", missing, "--gpus", "8", "--out", out))
    assert line == f"themis preview: error: {missing}: cannot read: No such file or directory"


def test_an_empty_window_and_missing_settings_are_one_line_each(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "out")
    line = _one_error_line(*_run(capsys, "--apps-file", str(APPS), "--gpus", "8", "--since",
                                 "2030-01-01", "--out", out))
    assert f"{APPS}: no app to replay: none of the 9 apps" in line
    assert "(left out: 1 state, 8 outside window)" in line
    line = _one_error_line(*_run(capsys, "--apps-file", str(APPS), "--out", out))
    assert "the cluster's GPUs are unknown: give --gpus N" in line
    line = _one_error_line(*_run(capsys, "--apps-file", str(APPS), "--gpus", "8", "--since",
                                 "yesterday", "--out", out))
    assert "--since: 'yesterday' is not a time" in line
    line = _one_error_line(*_run(capsys, "--apps-file", str(APPS), "--gpus", "8", "--since",
                                 "2026-01-02", "--until", "2026-01-01", "--out", out))
    assert "--until is not after --since" in line
    assert not (tmp_path / "out").exists()


def test_every_option_is_explained_with_its_default() -> None:
    p = argparse.ArgumentParser()
    configure(p)
    for action in p._actions:
        if action.dest == "help":
            continue
        assert action.help, action.dest
        assert "default" in action.help or action.required, action.dest


def test_times() -> None:
    now = T0 + 10 * 86_400_000
    assert parse_time("2025-12-01", "--since", now) == T0
    assert parse_time("2025-12-01T01:00+01:00", "--since", now) == T0
    assert parse_time("2025-12-01T00:00:00Z", "--since", now) == T0
    assert parse_time(str(T0), "--since", now) == T0
    assert parse_time("10d", "--since", now) == T0
    assert parse_time("12h", "--since", now) == now - 12 * 3_600_000
    assert parse_time("1.5w", "--since", now) == now - round(1.5 * 7 * 86_400_000)


def test_themis_apps_are_replayed_from_their_saved_job_records(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from .test_preview_jobrecords import JOBS, SPEC, _save, _state

    body = json.loads(APPS.read_text())
    first = body["apps"]["app"][0]
    first["applicationType"] = "THEMIS"
    apps = tmp_path / "apps.json"
    apps.write_text(json.dumps(body))
    records = tmp_path / "records"
    _save(records, first["id"], SPEC.to_json().encode(), _state(JOBS))
    base = ["--apps-file", str(apps), "--nodes-file", str(NODES), "--scheduler-file",
            str(SCHED), "--json", "--no-progress"]

    code, out, err = _run(capsys, *base, "--out", str(tmp_path / "a"),
                          "--job-records", str(records))
    assert code == 0, err
    summary = json.loads(out)
    assert summary["apps"]["with_job_records"] == 1
    assert summary["source"]["job_records"] == {"from": str(records), "read": 1, "absent": 0,
                                                "unreadable": 0, "unusable": 0}
    row = next(r for r in json.loads((tmp_path / "a" / "apps.json").read_text())
               if r["id"] == first["id"])
    assert (row["structure"], row["jobs"], row["phases"], row["gpus"], row["inferred"]) == (
        "job records", 3, 2, 2, [])
    assert "with their jobs from their job records: 1" in (
        tmp_path / "a" / "report.html").read_text()

    code, out, err = _run(capsys, *base, "--out", str(tmp_path / "b"), "--job-records", "off")
    assert code == 0, err
    assert json.loads(out)["apps"]["with_job_records"] == 0

    code, out, err = _run(capsys, *base, "--out", str(tmp_path / "c"),
                          "--job-records", str(tmp_path / "nowhere"))
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "--job-records" in err and "not a directory" in err
