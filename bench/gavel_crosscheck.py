"""Cross-check of the ``gavel`` and ``fifo`` baselines against Gavel's own simulator
(stanford-futuredata/gavel, ``scheduler/scripts/drivers/simulate_scheduler_with_trace.py``)
on the same jobs. Gavel is not part of this project: fetch it yourself, then

    python bench/gavel_crosscheck.py --gavel PATH/TO/gavel/scheduler \\
        --gavel-python PATH/TO/venv/bin/python [--vc 0e4a51 --seed 1 --jobs 214 --gpus 64]

The Gavel checkout needs its RPC stubs generated (``make rpc_stubs`` in scheduler/) and a
Python with numpy, cvxpy, ecos, grpcio, "protobuf<4" and psutil; Gavel's scheduler imports
``matrix_completion``, unused in simulation, for which this script puts an empty module
on Gavel's path.

The jobs: the first ``--jobs`` jobs of one philly-gavel VC file whose (type, GPUs) has a
throughput, each job shortened to ``--max-job-hours`` on its own GPUs, arrivals shifted
to start at 1 s (Gavel treats a last-reset time of 0 as "never reset"). Gavel runs them
with its defaults (6-minute rounds, resets at most every 1920 s, ECOS); the project runs
each job as a single-job app on ``--gpus`` GPUs in 8-GPU machines on one rack (no
placement slowdown), 6-minute leases on a 6-minute expiry grid, no restart pause (Gavel's
simulator has none). Both sides are scored by the same isolated-share rho: JCT over the
job's time alone on its GPUs x max(1, N_avg x GPUs / cluster), N_avg the time-averaged
number of active jobs over its life in that run. Policies: Gavel's
``finish_time_fairness`` beside ``gavel`` and ``gavel`` with ``idle_until_reset`` (Gavel's
simulator idles GPUs for jobs that arrived since the last reset), Gavel's ``fifo``
beside ``fifo``. Prints one JSON document on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from themis.sim.cluster import build_cluster
from themis.sim.engine import SimConfig, Simulator
from themis.sim.philly import load_throughputs, read_trace_files
from themis.sim.policies import make_policy
from themis.sim.policies.base import Policy
from themis.sim.policies.gavel import GavelFtfPolicy
from themis.sim.workload import AppSpec, JobSpec, Workload

Job = tuple[str, int, int, float, float]  # type, GPUs, steps, arrival, steps/s on its GPUs
Times = dict[int, tuple[float, float]]  # job index -> (arrival, finish)
SUCCEEDED = re.compile(
    r"\[Job succeeded\]\tJob ID: (\d+)\tStart timestamp: ([\d.]+)\tEnd timestamp: ([\d.]+)"
)


def select(trace: Path, thr: dict[tuple[str, int], float], n: int, cap_h: float) -> list[Job]:
    jobs = sorted(read_trace_files(trace), key=lambda j: (j.arrival, j.line))
    out: list[Job] = []
    for j in jobs:
        rate = thr.get((j.job_type, j.gpus))
        if rate is None:
            continue
        steps = min(j.steps, int(cap_h * 3600 * rate)) if cap_h > 0 else j.steps
        out.append((j.job_type, j.gpus, steps, j.arrival, rate))
        if len(out) == n:
            break
    if not out:
        raise SystemExit(f"{trace}: no job with a throughput")
    t0 = out[0][3] - 1.0
    return [(t, k, s, a - t0, r) for t, k, s, a, r in out]


def run_gavel(args: argparse.Namespace, jobs: list[Job], policy: str, work: Path) -> Times:
    trace = work / "jobs.trace"
    with trace.open("w") as f:
        for jt, k, steps, arrival, _ in jobs:
            f.write("\t".join([jt, "cmd", "wd", "--steps", "0", str(steps), str(k), "1", "-1",
                               f"{arrival:f}"]) + "\n")
    stubs = work / "stubs"
    stubs.mkdir(exist_ok=True)
    (stubs / "matrix_completion.py").write_text("")
    log = work / f"gavel-{policy}.log"
    cmd = [args.gavel_python, "scripts/drivers/simulate_scheduler_with_trace.py", "-t",
           str(trace), "-p", policy, "--throughputs_file", str(args.throughputs), "-c",
           f"{args.gpus}:0:0", "--num_gpus_per_server", "8:1:1", "--seed", "0"]
    with log.open("w") as fh:
        subprocess.run(cmd, cwd=args.gavel, stdout=fh, stderr=subprocess.STDOUT, check=True,
                       env={"PYTHONPATH": str(stubs), "PATH": "/usr/bin:/bin"})
    out: Times = {}
    for line in log.open():
        m = SUCCEEDED.search(line)
        if m:
            out[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    return out


def run_ours(jobs: list[Job], policy: Policy, gpus: int) -> Times:
    apps = [
        AppSpec(f"j{i:05d}", arrival, (JobSpec(f"j{i}", k / rate, k),), (((0, float(steps)),),))
        for i, (_, k, steps, arrival, rate) in enumerate(jobs)
    ]
    topo = build_cluster([(gpus // 8, [2, 2, 2, 2])], racks=1)
    cfg = SimConfig(lease_s=360.0, restart_s=0.0, expiry_quantum_s=360.0, check_invariants=False)
    r = Simulator(topo, Workload(apps), policy, cfg).run()
    return {int(a.id[1:]): (a.arrival, a.finish) for a in r.apps}


def score(jobs: list[Job], times: Times, gpus: int) -> dict[str, float]:
    events = sorted([(a, 1) for a, _ in times.values()] + [(f, -1) for _, f in times.values()])
    stamps, marks = [t for t, _ in events], []
    active, area, last = 0, 0.0, 0.0
    for t, d in events:
        area += active * (t - last)
        last, active = t, active + d
        marks.append((t, area, active))

    def integral(t: float) -> float:
        i = bisect.bisect_right(stamps, t) - 1
        if i < 0:
            return 0.0
        t0, a0, n0 = marks[i]
        return a0 + n0 * (t - t0)

    rhos, jcts = [], []
    for i, (_, k, steps, _, rate) in enumerate(jobs):
        arrival, finish = times[i]
        jct = finish - arrival
        n_avg = max(1.0, (integral(finish) - integral(arrival)) / jct) if jct > 0 else 1.0
        rhos.append(jct / (steps / rate * max(1.0, n_avg * k / gpus)))
        jcts.append(jct)
    s = sorted(rhos)

    def q(p: float) -> float:
        return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]

    return {"jobs": len(s), "avg_jct_hours": statistics.fmean(jcts) / 3600, "max_rho": s[-1],
            "p99_rho": q(99), "p95_rho": q(95), "median_rho": q(50),
            "frac_rho_gt_1": sum(r > 1 for r in s) / len(s)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gavel", type=Path, required=True, help="Gavel's scheduler/ directory")
    p.add_argument("--gavel-python", required=True, help="a Python that runs Gavel")
    p.add_argument("--traces", type=Path, default=Path("/work/shared/traces/philly-gavel"),
                   help="philly-gavel directory (default /work/shared/traces/philly-gavel)")
    p.add_argument("--vc", default="0e4a51", help="VC file name (default 0e4a51)")
    p.add_argument("--seed", type=int, default=1, help="trace seed directory (default 1)")
    p.add_argument("--jobs", type=int, default=214, help="first N usable jobs (default 214)")
    p.add_argument("--max-job-hours", type=float, default=48.0,
                   help="shorten longer jobs to this many hours on their GPUs; 0: keep "
                        "(default 48)")
    p.add_argument("--gpus", type=int, default=64, help="GPUs, a multiple of 8 (default 64)")
    args = p.parse_args()
    if args.gpus < 8 or args.gpus % 8:
        p.error(f"--gpus {args.gpus}: must be a positive multiple of 8")
    args.throughputs = args.traces / "simulation_throughputs.json"
    jobs = select(args.traces / f"seed={args.seed}" / f"{args.vc}.trace",
                  load_throughputs(args.throughputs), args.jobs, args.max_job_hours)
    out: dict[str, Any] = {"jobs": len(jobs), "gpus": args.gpus, "vc": args.vc,
                           "seed": args.seed, "max_job_hours": args.max_job_hours,
                           "runs": {}}
    runs: list[tuple[str, str | Policy]] = [
        ("gavel-sim finish_time_fairness", "finish_time_fairness"),
        ("themis-sim gavel", make_policy("gavel")),
        ("themis-sim gavel idle_until_reset", GavelFtfPolicy(idle_until_reset=True)),
        ("gavel-sim fifo", "fifo"),
        ("themis-sim fifo", make_policy("fifo")),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name, what in runs:
            t0 = time.perf_counter()
            if isinstance(what, str):
                times = run_gavel(args, jobs, what, Path(tmp))
            else:
                times = run_ours(jobs, what, args.gpus)
            if len(times) != len(jobs):
                raise SystemExit(f"{name}: {len(times)} of {len(jobs)} jobs finished")
            out["runs"][name] = score(jobs, times, args.gpus)
            print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
