"""``themis preview`` at scale: a saved ``GET /ws/v1/cluster/apps`` response of 10,000
finished GPU apps made from the Philly VC traces, then each stage of the preview timed
(parse, trace, the replays - at once, as the preview runs them - and the report; also each
replay's own wall time). Prints one JSON document.

    python bench/bench_preview.py [--apps 10000] [--gpus 640] [--out out/bench-preview]

The history. The jobs of every ``*.trace`` file of ``--traces`` (the philly-gavel
format, themis.sim.philly), in arrival order, first ``--apps``; each job is one app of
``TENSORFLOW`` type in queue ``root.<vc>`` of user ``vc-<vc>``, asking ``scale_factor``
GPUs for ``total_steps`` at the ``v100`` throughput of its type and size (the converter's
duration). What happened to them is made by a plain FIFO of gang-scheduled jobs on
``--gpus`` GPUs (an app starts once every earlier app has started and its GPUs are free;
no backfilling, no preemption): ``startedTime`` is the submission, ``launchTime`` the
start of the run, ``finishedTime`` its end, ``yarn.io/gpu`` GPU-seconds = GPUs x run time.
So the observed JCT includes the queueing, and the demand inferred from
GPU-seconds / (finishedTime - startedTime) is below the true one for every app that
waited (docs/preview.md, "What is read and what is inferred").

The preview then runs as ``themis preview --apps-file ... --gpus G --gpus-per-node 8
--current capacity`` does (same functions, timed one by one, wall and CPU seconds; the
replays' CPU seconds include their worker processes').
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import resource
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# this checkout's themis, whatever else is installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from themis.preview import report
from themis.preview.cluster import current_given, uniform_topology
from themis.preview.history import parse_json, read_apps
from themis.preview.replay import DEFAULT_QUANTUM_S, ReplayConfig, replay_all
from themis.preview.trace import select, to_workload
from themis.sim.philly import find_throughputs, load_throughputs, read_trace_files, serial_iter_time

TRACES = "/work/shared/traces/philly-gavel/seed=0"
CLUSTER_TS = 1764540000000  # the cluster's start: application ids and startedTime origin
T0 = 1764547200000  # 2025-12-01T00:00:00Z, the trace's time 0


def history(traces: Path, n: int, gpus: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The apps response (see the module doc) and facts about it."""
    jobs = read_trace_files(traces)
    thr = load_throughputs(find_throughputs(traces))
    jobs.sort(key=lambda j: (j.arrival, j.vc, j.line))
    jobs = jobs[:n]
    t_first = jobs[0].arrival
    # strict FIFO, gang-scheduled: the head waits until its GPUs are free
    free = gpus
    running: list[tuple[float, int]] = []  # (end, gpus)
    clock = 0.0
    apps = []
    waits = []
    for k, j in enumerate(jobs, 1):
        need = min(j.gpus, gpus)
        run_s = j.steps * serial_iter_time(thr, j) / j.gpus
        submit = j.arrival - t_first
        clock = max(clock, submit)
        while free < need:
            end, g = heapq.heappop(running)
            clock = max(clock, end)
            free += g
        start = clock
        heapq.heappush(running, (start + run_s, need))
        free -= need
        waits.append(start - submit)
        started = T0 + round(submit * 1000)
        launch = T0 + round(start * 1000)
        finished = launch + max(1, round(run_s * 1000))
        gpu_s = round(need * (finished - launch) / 1000)
        aid = f"application_{CLUSTER_TS}_{k:05d}"
        apps.append({
            "id": aid, "user": f"vc-{j.vc}", "name": j.job_type, "queue": f"root.{j.vc}",
            "state": "FINISHED", "finalStatus": "SUCCEEDED", "progress": 100.0,
            "trackingUI": "History", "diagnostics": "", "clusterId": CLUSTER_TS,
            "applicationType": "TENSORFLOW", "applicationTags": "", "priority": 0,
            "startedTime": started, "launchTime": launch, "finishedTime": finished,
            "elapsedTime": finished - started, "allocatedMB": -1, "allocatedVCores": -1,
            "runningContainers": -1, "memorySeconds": gpu_s * 32768, "vcoreSeconds": gpu_s * 8,
            "resourceSecondsMap": {"entry": [
                {"key": "memory-mb", "value": str(gpu_s * 32768)},
                {"key": "vcores", "value": str(gpu_s * 8)},
                {"key": "yarn.io/gpu", "value": str(gpu_s)}]},
            "preemptedResourceSecondsMap": {}, "logAggregationStatus": "SUCCEEDED",
            "unmanagedApplication": False,
        })
    waits.sort()
    facts = {"jobs": len(jobs), "span_days": (jobs[-1].arrival - t_first) / 86400,
             "gpu_hours": sum(int(a["resourceSecondsMap"]["entry"][2]["value"])
                              for a in apps) / 3600,
             "fifo_wait_hours_median": waits[len(waits) // 2] / 3600,
             "fifo_wait_hours_p90": waits[int(0.9 * len(waits))] / 3600,
             "apps_that_waited": sum(1 for w in waits if w > 0)}
    return {"apps": {"app": apps}}, facts


def cpu_s() -> float:
    """CPU seconds of this process and of its ended worker processes (the replays')."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class Stages:
    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def time(self, name: str, fn: Any) -> Any:
        w0, c0 = time.perf_counter(), cpu_s()
        out = fn()
        self.wall[name] = round(self.wall.get(name, 0.0) + time.perf_counter() - w0, 3)
        self.cpu[name] = round(self.cpu.get(name, 0.0) + cpu_s() - c0, 3)
        print(f"bench_preview: {name}: {self.wall[name]:.1f} s wall, {self.cpu[name]:.1f} s "
              "CPU", file=sys.stderr, flush=True)
        return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", type=Path, default=Path(TRACES),
                   help="a philly-gavel directory of *.trace files (default: %(default)s)")
    p.add_argument("--apps", type=int, default=10_000,
                   help="finished apps in the response (default: %(default)s)")
    p.add_argument("--gpus", type=int, default=640,
                   help="the cluster's GPUs, for the history's FIFO and the replay "
                   "(default: %(default)s)")
    p.add_argument("--policies", default="fifo,themis",
                   help="policies replayed, in order; fifo (the history's own policy, "
                   "which the report's calibration replays) must be one of them "
                   "(default: %(default)s: the CapacityScheduler's and Themis)")
    p.add_argument("--runtime-from", default="elapsed", choices=("elapsed", "launch"),
                   help="as themis preview's option (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("out/bench-preview"),
                   help="where apps.json (the response) and the report go (default: "
                   "%(default)s)")
    p.add_argument("--processes", type=int, default=None,
                   help="as themis preview's option: the replays run at once in up to N "
                   "worker processes, 1: one after the other (default: one per replay, at "
                   "most one per CPU)")
    p.add_argument("--expiry-quantum-seconds", type=float, default=DEFAULT_QUANTUM_S,
                   help="the replay's expiry quantum: leases end at multiples of it (not "
                   "an option of themis preview, which keeps the simulator's; "
                   "default: %(default)s)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=False,
                   help="progress bars on stderr (default: off)")
    args = p.parse_args()
    if not args.expiry_quantum_seconds >= 0:
        p.error(f"--expiry-quantum-seconds {args.expiry_quantum_seconds}: must be >= 0")
    if "fifo" not in args.policies.split(","):
        p.error(f"--policies {args.policies!r}: fifo must be one of them (the history's "
                "current policy: the report compares every policy with it and calibrates "
                "its replay against what happened)")
    args.out.mkdir(parents=True, exist_ok=True)
    st = Stages()
    doc, facts = st.time("generate", lambda: history(args.traces, args.apps, args.gpus))
    saved = args.out / "rm-apps.json"
    data = json.dumps(doc).encode()
    saved.write_bytes(data)

    apps = st.time("parse", lambda: read_apps(parse_json(data, str(saved)), str(saved)))
    nodes = uniform_topology(args.gpus, 8)
    sel = st.time("trace", lambda: select(apps, cluster_gpus=args.gpus,
                                          runtime_from=args.runtime_from))
    work = st.time("trace", lambda: to_workload(sel)) if sel.apps else None
    assert work is not None
    cfg = ReplayConfig(expiry_quantum_seconds=args.expiry_quantum_seconds)
    results, replay_wall = st.time("replays", lambda: replay_all(
        args.policies.split(","), nodes.topology, work, cfg, progress=args.progress,
        processes=args.processes))
    current = current_given("capacity", "bench")

    def make_report() -> dict[str, Any]:
        rows = report.per_app_rows(sel, results)
        context = {"tool": "bench_preview", "version": "", "generated_at": "",
                   "source": {"apps": str(saved), "states": ["FINISHED"], "window": {},
                              "window_text": "all", "runtime_from": args.runtime_from},
                   "cluster": nodes.to_dict(), "current": current.to_dict(),
                   "config": cfg.to_dict()}
        cur = current.policy if current.policy in results else next(iter(results))
        summary = report.build_summary(sel, results, current=cur, rows=rows, worst=10,
                                       context=context)
        title = f"bench: {len(sel.apps):,} apps, {args.gpus} GPUs"
        figures = report.plots(results, sel, cur, title)
        report.write(args.out, summary, rows, report.render_html(summary, rows, figures,
                                                                 title))
        return summary

    summary = st.time("report", make_report)
    preview_wall = sum(v for k, v in st.wall.items() if k != "generate")
    out = {
        "bench": "bench_preview",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "load_average_at_end": os.getloadavg()},
        "apps": args.apps, "gpus": args.gpus, "response_bytes": len(data),
        "history": facts,
        "wall_s": st.wall, "cpu_s": st.cpu,
        "replay_wall_s": {k: round(v, 3) for k, v in replay_wall.items()},
        "preview_wall_s": round(preview_wall, 1),
        "preview_cpu_s": round(sum(v for k, v in st.cpu.items() if k != "generate"), 1),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "rounds": {k: r.rounds for k, r in results.items()},
        "makespan_days": {k: round(r.makespan / 86400, 1) for k, r in results.items()},
        "results": {k: {m: v[m] for m in ("max_rho", "p99_rho", "median_rho",
                                          "frac_rho_gt_1", "gpu_time_hours",
                                          "avg_jct_hours")}
                    for k, v in summary["policies"].items()},
        "calibration": {k: summary["calibration"][k] for k in (
            "policy", "median_abs_rel_error", "worst_abs_rel_error",
            "observed_avg_jct_hours", "replay_avg_jct_hours")},
        "target_s": 120,
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

