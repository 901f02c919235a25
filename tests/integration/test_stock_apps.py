"""Stock YARN apps share the dockerised mini-cluster with Themis apps (docs/yarn.md, "Apps that
do not speak Themis"): two Themis apps hold every GPU; a real MapReduce job (``pi`` with the
3.5.0 MapReduce jars, not in uber mode: the NodeManagers run the ``mapreduce_shuffle``
aux-service) and a GPU app written against YARN's client API (``StockGpuApp`` in the rm-plugin
test sources: its AM asks one 2-GPU container running ``sleep``, DistributedShell-style, and
fails on a preempted container) are submitted meanwhile. Checks: all finish successfully under
the default stock-app policy (hold); while the stock app waits its YARN diagnostics (REST) say
why and ``themis status --all`` lists it with its ask; once GPUs it fits on are free it has
them within one round (its wait reason never stays "offered in the next round"); its 2 GPUs
are on one node; the RM log has no exception; no GPU is used by two containers at once (the
NodeManagers' logs: running GPU containers never exceed a node's GPUs; with the lease log:
every GPU container runs inside a lease of its app on its node). Then, on idle GPUs, the
time from the stock app's GPU ask to its container running (5 trials, printed). The Themis
apps' job command carries quotes, ``$((..))`` and parentheses: the AM passes it through
YARN's launch script unharmed.

Short leases (40 s) and jobs (15 s) keep it small: about 5 min on the project's 2-core VM, cluster start-up
included. Environment: as tests/integration/minicluster.py.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.minicluster import NMS, RM, ROOT, _get, themis
from tests.integration.stockapps import (
    Client,
    am_log,
    app_report,
    gpu_containers,
    gpu_use_violations,
    hyperband_spec,
    nm_logs,
    rm_log,
    stock_cluster,
    stock_timings,
    submit_stock_app,
    themis_state,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(1200)]
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

LEASE_MS = 40000
GRACE_MS = 5000
AGENT_PORT = 8642
OVERRIDES = {
    "yarn.resourcemanager.themis.lease-duration-ms": str(LEASE_MS),
    "yarn.resourcemanager.themis.grace-period-ms": str(GRACE_MS),
    "yarn.resourcemanager.themis.agent-port": str(AGENT_PORT),
}
# The Themis apps' job (stockapps.hyperband_spec: three 2-GPU jobs, then the best one again):
# each run sleeps 15 s, well inside a lease (a job stopped at a lease end restarts from
# scratch: one longer than the lease would never end); the step target and checkpoint URI
# every command must take are passed to `true`. Quotes, $ and
# parentheses on purpose: YARN puts a container's command inside double quotes in its launch
# script, and the AM must pass the job command through unharmed (a broken one exits non-zero
# and its app fails).
JOB = """sleep 15 && test "$((1 + 1))" = '2' && true "(steps)" {max_steps} {checkpoint_uri}"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    with stock_cluster("stock", OVERRIDES, AGENT_PORT) as c:
        yield c


def test_stock_apps_and_mapreduce_share_gpus_with_themis_apps(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    t_start = time.monotonic()
    themis_apps = []
    for i, name in enumerate(("hb-one", "hb-two")):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(hyperband_spec(name, i, JOB))
        r = themis("submit", str(spec))
        assert r.returncode == 0, (r.stdout, r.stderr)
        themis_apps.append(r.stdout.strip().splitlines()[-1])

    # --- the Themis apps hold every GPU (8: nm1 4, nm2 2, nm3 2)
    def all_held() -> bool:
        st = themis_state()
        live = sum(le["gpus"] for le in st["leases"] if le["state"] == "ACTIVE")
        return live == 8 and {le["app_id"] for le in st["leases"]} <= set(themis_apps)
    wait_for("the Themis apps to hold every GPU", 240, all_held)

    # --- a MapReduce job (on YARN, not uber) and a stock 2-GPU app, submitted now
    pi = Client(cluster["rm"], "org.apache.hadoop.examples.ExampleDriver", "pi", "2", "20")
    pi.start()
    stock, stock_id = submit_stock_app(cluster["rm"], "stock-2gpu", 10)
    # --- while it waits, its YARN diagnostics (REST) and `themis status --all` say so
    why, listed = "", None
    end = time.monotonic() + 120
    while time.monotonic() < end and not (why and listed):
        d = str(app_report(stock_id).get("diagnostics", ""))
        if "Themis: waiting for GPUs: 2 GPUs asked (1 container of 2 GPUs)" in d:
            why = d
        r = themis("status", "--all", "--json")
        assert r.returncode == 0, r.stderr
        entry = {e["app"]["id"]: e for e in json.loads(r.stdout)}.get(stock_id)
        if entry and entry["gpus"] and entry["gpus"]["asks"]:
            listed = entry
        time.sleep(0.5)
    assert why and "next round" in why, why
    assert listed, f"themis status --all never showed {stock_id}'s ask"
    assert listed["gpus"]["agent"] is False, listed
    assert listed["gpus"]["asks"] == [{"gpus_per_container": 2, "containers": 1}], listed
    assert listed["app"]["applicationType"] == "YARN", listed

    # --- everything finishes
    for t in (pi, stock):
        t.join(timeout=600)
        assert t.code is not None, "client still running after 10 min"
    assert pi.code == 0, pi.out[-3000:]
    assert "Estimated value of Pi is" in pi.out, pi.out[-2000:]
    assert "uber mode : false" in pi.out, pi.out[-2000:]
    assert stock.code == 0, stock.out[-3000:]
    final = app_report(stock_id)
    assert final["finalStatus"] == "SUCCEEDED", final
    timing = stock_timings(final["diagnostics"])
    nodes = re.search(r"nodes=\{([^}]*)\}", final["diagnostics"])
    assert nodes and re.fullmatch(r"nm\d:\d+=2", nodes[1]), final["diagnostics"]
    for a in themis_apps:
        try:
            done = wait_for(f"{a} to finish", 420, lambda a=a: (
                x if (x := app_report(a))["state"] in ("FINISHED", "FAILED", "KILLED") else None), 5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{am_log(cluster, a)}") from None
        assert done["finalStatus"] == "SUCCEEDED", (done, am_log(cluster, a))

    # --- from the RM log: the stock app's wait reasons, each change once, at INFO; it never
    # stayed "offered in the next round" (free GPUs that fit it) longer than about a round
    log = rm_log(cluster)
    reasons = [(m[1], m[2]) for m in re.finditer(
        r"^(\S+ \S+) INFO .*WaitDiagnostics: Themis: " + re.escape(stock_id) + r" (.*)$",
        log, re.M)]
    assert reasons and reasons[0][1].startswith("waiting for GPUs"), reasons
    stamps = [time.mktime(time.strptime(t.split(",")[0], "%Y-%m-%d %H:%M:%S"))
              for t, _ in reasons]
    for i, (_, text) in enumerate(reasons):
        if "offered in the next round" in text and i + 1 < len(reasons):
            assert stamps[i + 1] - stamps[i] <= 3, reasons
    # it got its lease: "placing its containers" lasts from the grant to the nodes' next
    # heartbeats and is logged only when a status update falls in between (its text is
    # checked in WaitDiagnosticsPartitionTest); "holds" follows once its containers run
    assert any(t.startswith(("placing its containers", "holds ")) for _, t in reasons), reasons
    bad = [ln for ln in log.splitlines() if "Exception" in ln]
    assert not bad, "\n".join(bad[:20])
    # --- no GPU used by two containers at once (NodeManager logs and the lease log)
    _assert_gpus_used_once(cluster)
    print(f"stock app waited {timing['running'] / 1000:.1f} s (ask -> container running) "
          f"while Themis apps held the GPUs; reasons: {[t[:60] for _, t in reasons]}; "
          f"scenario {time.monotonic() - t_start:.0f} s")


def test_idle_gpus_reach_a_stock_app_at_once(cluster: dict[str, Any]) -> None:
    """On idle GPUs: time from the stock app's GPU ask (AM side) to its 2-GPU container
    allocated and running; target <= 2 s."""
    wait_for("no lease left", 120, lambda: not themis_state()["leases"], 2)
    running, allocated = [], []
    for i in range(5):
        c, app_id = submit_stock_app(cluster["rm"], f"stock-idle-{i}", 1)
        c.join(timeout=300)
        assert c.code == 0, c.out[-3000:]
        t = stock_timings(app_report(app_id)["diagnostics"])
        allocated.append(t["allocated"])
        running.append(t["running"])
    running.sort()
    print(f"idle GPUs: stock app's GPU ask -> 2-GPU container allocated {sorted(allocated)} ms, "
          f"running {running} ms (median {statistics.median(running):.0f}, max {running[-1]}; "
          "round-interval 250 ms, NM heartbeat 500 ms)")
    assert statistics.median(running) <= 2000, running
    _assert_gpus_used_once(cluster)


def test_preview_replays_this_clusters_history(tmp_path: Path) -> None:
    """``themis preview`` against the live RM once the apps above have finished (issue 38):
    every finished GPU app is replayed, the GPU-seconds are the RM's own within 1 %, the two
    Themis apps are replayed from their job records in HDFS, the calibration is reported,
    and report.html renders in a real headless browser (Debian's chromium; its screenshot
    is kept in out/test-artifacts/preview/)."""
    out = tmp_path / "preview"
    r = themis("preview", "--out", str(out), "--json", "--no-progress", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    rows = json.loads((out / "apps.json").read_text())

    apps = _get(f"{RM}/ws/v1/cluster/apps?states=FINISHED,FAILED,KILLED",
                timeout=30)["apps"]["app"]
    gpu_s = {a["id"]: _gpu_seconds(a) for a in apps}
    gpu_apps = {a for a, v in gpu_s.items() if v > 0}
    assert {row["id"] for row in rows} == gpu_apps
    assert summary["apps"]["read"] == len(apps)
    assert summary["observed"]["gpu_time_hours"] == pytest.approx(
        sum(gpu_s.values()) / 3600, rel=0.01)
    themis_apps = {a["id"] for a in apps if a["applicationType"] == "THEMIS"}
    assert len(themis_apps) == 2, themis_apps
    assert summary["source"]["job_records"]["read"] == 2, (summary["source"], r.stderr[-2000:])
    for row in rows:
        assert row["structure"] == ("job records" if row["id"] in themis_apps
                                    else "one job (assumed)"), row
        if row["id"] in themis_apps:
            assert row["jobs"] >= 3 and row["phases"] >= 2, row  # Hyperband's rungs
    cal = summary["calibration"]
    assert cal["apps"] == len(gpu_apps) and cal["median_abs_rel_error"] >= 0, cal
    assert set(summary["policies"]) == {"fifo", "themis"}, summary["policies"]

    # the report in a real browser: the DOM it renders, and a screenshot that is not blank
    subprocess.run(["bash", str(ROOT / "scripts" / "browser-setup.sh")], check=True,
                   timeout=900)
    browser = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    page = (out / "report.html").resolve().as_uri()
    dom = subprocess.run([*browser, "--dump-dom", page], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0 and dom.stdout.count("<svg") == 3, dom.stderr[-2000:]
    assert "Calibration" in dom.stdout and "job records" in dom.stdout
    shots = ROOT / "out" / "test-artifacts" / "preview"
    shots.mkdir(parents=True, exist_ok=True)
    shot = shots / "report.png"
    shot.unlink(missing_ok=True)
    s = subprocess.run([*browser, "--window-size=1280,2400", f"--screenshot={shot}", page],
                       capture_output=True, text=True, timeout=120)
    assert s.returncode == 0 and shot.is_file(), s.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[:2] == (2400, 1280) and pixels.std() > 0.05, pixels.std()
    print(f"preview of {len(gpu_apps)} GPU apps ({len(themis_apps)} Themis) from the live RM: "
          f"calibration median |JCT error| {cal['median_abs_rel_error']:.1%}; "
          f"screenshot {shot}")


def _gpu_seconds(app: dict[str, Any]) -> float:
    entries = (app.get("resourceSecondsMap") or {}).get("entry") or []
    if isinstance(entries, dict):
        entries = [entries]
    return sum(float(e["value"]) for e in entries if e.get("key") == "yarn.io/gpu")


def _assert_gpus_used_once(cluster: dict[str, Any]) -> None:
    logs = nm_logs(cluster)
    assert gpu_containers(logs), "no GPU container found in the NodeManager logs"
    bad = gpu_use_violations(logs, {n: g for n, (g, _) in NMS.items()}, rm_log(cluster),
                             lease_s=LEASE_MS / 1000, grace_s=GRACE_MS / 1000)
    assert not bad, "\n".join(bad[:20])
