"""Scale benchmark of the RM plugin (issue "proven at data-centre scale"; docs/yarn.md, "Scale").

Drives a real ResourceManager (YARN's MockRM/MockNM test harness from the
``hadoop-yarn-server-resourcemanager`` tests jar: every RM service in one JVM, NodeManagers
and AMs calling the RM's services directly) twice in one JVM, with the same simulated
NodeManagers (GPUs spread evenly), apps and asks: first the stock CapacityScheduler, then
ThemisCapacityScheduler with its Python engine (``themis.yarn.engine`` over Py4J) and one
real agent per GPU app speaking gRPC to the engine (bench/scale_agents.py), the agents split
over ``--agent-procs`` processes (each AM is its own process on a real cluster). The driver is
``rm-plugin/src/bench/java/org/themis/yarn/ScaleBench.java`` (Maven profile ``scale-bench``;
not in the plugin jar nor in the JUnit suite).

Per size: half the apps (``--gpu-share``) ask 1-GPU containers without end (as many as the
cluster has GPUs); the others ask ``--nongpu`` 128 MB containers in total per batch,
``--batches`` times. Reported side by side:

* non-GPU container allocations per second (median batch), the ratio Themis / stock
  (target >= 0.95);
* Themis only: time from a lease's expiry (its containers are killed, no grace period) to
  the next lease granted on that node and to the next GPU container committed there
  (median, p95; target <= 1 s / <= 3 s at 1,000 NMs / 4,096 GPUs / 1,000 apps), with where
  the time goes (round in the RM, the engine's round, the freed-round delay) and the
  auction's share of the engine's round (its solve time / the round's time, median over the
  rounds in which apps bid, from the engine's round log lines);
* RM heap after full GC (used heap minus the JVM's before the RM started; target: Themis
  minus stock <= 200 MB), the engine's RSS and the agents' driver RSS.

Prints one JSON document on stdout (``summary``: one line per size with the figures above;
``results``: everything per size); progress on stderr. Sizes: ``quick`` (8 NMs, 32 GPUs,
20 apps: about 1 minute), ``paper`` (38 NMs, 256 GPUs, 100 apps: the paper's cluster),
``mid`` (250 NMs, 2,000 GPUs, 500 apps), ``large`` (1,000 NMs, 4,096 GPUs, 1,000 apps).
Needs Java 17 and Maven (the first run downloads the Hadoop test jars); Python deps as for
the plugin's ITs (grpc, py4j).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIZES: dict[str, tuple[int, int, int]] = {  # NMs, GPUs, apps
    "quick": (8, 32, 20),
    "paper": (38, 256, 100),
    "mid": (250, 2000, 500),
    "large": (1000, 4096, 1000),
}


def log(msg: str) -> None:
    print(f"[bench_scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python bench/bench_scale.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="paper,mid,large",
                   help="comma-separated sizes among " + ", ".join(SIZES)
                   + " (default paper,mid,large)")
    p.add_argument("--quick", action="store_true", help="same as --sizes quick")
    p.add_argument("--gpu-share", type=float, default=0.5,
                   help="fraction of the apps that ask for GPUs and run an agent (default 0.5)")
    p.add_argument("--nongpu", type=int, default=5000,
                   help="non-GPU containers asked per batch, over the non-GPU apps "
                   "(default 5000)")
    p.add_argument("--batches", type=int, default=3,
                   help="non-GPU batches per scheduler; the median counts, without the first "
                   "(JIT warm-up) when there are 3 or more (default 3)")
    p.add_argument("--demand", type=int, default=4,
                   help="most GPUs each agent's synthetic job can use (default 4)")
    p.add_argument("--lease-ms", type=int, default=8000,
                   help="Themis lease duration in the benchmark (default 8000)")
    p.add_argument("--turnover-s", type=float, default=20.0,
                   help="how long lease expiries are watched (default 20)")
    p.add_argument("--renew-ahead-ms", type=int, default=None,
                   help="yarn-site renew-ahead-ms for Themis (docs/yarn.md, \"Renewal in "
                   "place\"): a round this long before a lease ends re-offers its GPUs and a "
                   "holder that wins them back keeps its lease; 0 turns it off. Default: the "
                   "product's (20000, at most a quarter of the lease: 2000 with 8-s leases)")
    p.add_argument("--heartbeat-ms", type=int, default=1000,
                   help="NodeManager heartbeat interval (default 1000, YARN's default)")
    p.add_argument("--order", choices=["stock,themis", "themis,stock"], default="stock,themis",
                   help="which scheduler runs first in the JVM (default stock,themis)")
    p.add_argument("--python", default=sys.executable,
                   help="Python for the engine and the agents (default: this one)")
    p.add_argument("--agent-procs", type=int, default=None,
                   help="processes the GPU apps' agents are split over, each with its own "
                   "gRPC channel (bench/scale_agents.py --procs; 1: all in one process, as "
                   "before). Default: min(8, GPU apps): on a real cluster each agent runs in "
                   "its own AM process, so one process for all serialises the agents' offer "
                   "parsing and bid tables; 8 lets up to 8 cores do that in parallel while "
                   "keeping memory and start-up bounded (~50 MB and ~1 s of CPU per process). "
                   "Processes beyond the host's cores add no parallelism but cost CPU and "
                   "memory that the RM JVM and the engine share (on a 2-core machine 8 "
                   "processes compete with them)")
    p.add_argument("--split-cpus", metavar="RM:AGENTS", default=None,
                   help="pin the RM side (Maven, the RM's JVM and its Python engine, in "
                   "both the stock and the Themis phase) to the CPUs before the colon and the "
                   "agents to those after it, as taskset -c lists (e.g. 0:1): on a real "
                   "cluster the AMs and their agents run on other hosts, so this takes their "
                   "CPU off the RM's cores. Default: no pinning (everything shares every CPU)")
    p.add_argument("--offline", action="store_true",
                   help="run Maven offline (-o): the Hadoop test jars are already in ~/.m2")
    args = p.parse_args(argv)
    sizes = ["quick"] if args.quick else [s.strip() for s in args.sizes.split(",") if s.strip()]
    bad = [s for s in sizes if s not in SIZES]
    if bad or not sizes:
        p.error(f"--sizes: unknown size(s) {bad}; choose among {', '.join(SIZES)}")
    if not 0 < args.gpu_share < 1:
        p.error("--gpu-share must be between 0 and 1 (exclusive)")
    if args.nongpu < 1 or args.batches < 1 or args.demand < 1 or args.lease_ms < 1000:
        p.error("--nongpu, --batches, --demand must be >= 1 and --lease-ms >= 1000")
    if args.agent_procs is not None and args.agent_procs < 1:
        p.error("--agent-procs must be >= 1")
    args.size_list = sizes
    args.cpus = None
    if args.split_cpus is not None:
        try:
            args.cpus = split_cpus(args.split_cpus, os.sched_getaffinity(0))
        except ValueError as exc:
            p.error(f"--split-cpus: {exc}")
    return args


def split_cpus(text: str, usable: set[int]) -> tuple[str, str]:
    """``RM:AGENTS`` checked: two non-empty, disjoint CPU lists of CPUs this process may use."""
    rm, colon, agents = text.partition(":")
    if not colon:
        raise ValueError(f"{text!r} is not RM:AGENTS (e.g. 0:1)")
    parse = agents_mod().cpu_list
    sets = [parse(rm), parse(agents)]
    if sets[0] & sets[1]:
        raise ValueError(f"{text!r}: CPUs {sorted(sets[0] & sets[1])} on both sides")
    missing = sorted((sets[0] | sets[1]) - usable)
    if missing:
        raise ValueError(f"{text!r}: CPUs {missing} are not usable here (usable: "
                         f"{sorted(usable)})")
    return rm.strip(), agents.strip()


def agents_mod() -> Any:
    """bench/scale_agents.py (its CPU-list parser), imported from beside this script (it
    imports the themis package: from the checkout, as the agents' PYTHONPATH has it)."""
    added = [str(ROOT / "bench"), str(ROOT)]
    sys.path[:0] = added
    try:
        import scale_agents
    finally:
        del sys.path[:len(added)]
    return scale_agents


DEFAULT_AGENT_PROCS = 8


def agent_procs(requested: int | None, gpu_apps: int) -> int:
    """Agent processes for a size: ``requested`` (default :data:`DEFAULT_AGENT_PROCS`), at
    most one per GPU app and at least one."""
    n = DEFAULT_AGENT_PROCS if requested is None else requested
    return max(1, min(n, gpu_apps))


def run_size(args: argparse.Namespace, size: str) -> dict[str, Any]:
    nms, gpus, apps = SIZES[size]
    gpu_apps = round(apps * args.gpu_share)
    procs = agent_procs(args.agent_procs, gpu_apps)
    per_app = max(1, args.nongpu // max(1, apps - gpu_apps))
    target = ROOT / "rm-plugin" / "target" / "scale-bench"
    target.mkdir(parents=True, exist_ok=True)
    out = target / f"bench-scale-{size}.json"
    out.unlink(missing_ok=True)
    props = {
        "bench.nms": nms, "bench.gpus": gpus, "bench.apps": apps,
        "bench.gpu-share": args.gpu_share, "bench.nongpu-per-app": per_app,
        "bench.batches": args.batches, "bench.demand": args.demand,
        "bench.lease-ms": args.lease_ms, "bench.turnover-ms": int(args.turnover_s * 1000),
        "bench.heartbeat-ms": args.heartbeat_ms, "bench.python": args.python,
        "bench.order": args.order, "bench.agent-procs": procs, "bench.out": out,
    }
    if args.renew_ahead_ms is not None:
        props["bench.renew-ahead-ms"] = args.renew_ahead_ms
    cmd = ["mvn", "-B", "-P", "scale-bench", "-pl", "rm-plugin", "test", "-Dtest=ScaleBench",
           "-Dsurefire.failIfNoSpecifiedTests=false"]
    cmd += ["-o"] if args.offline else []
    cmd += [f"-D{k}={v}" for k, v in props.items()]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if args.cpus is not None:  # Maven's JVMs and the engine inherit the RM side's CPUs
        cmd = ["taskset", "-c", args.cpus[0], *cmd]
        env["THEMIS_BENCH_AGENT_CPUS"] = args.cpus[1]
    logfile = target / f"bench-scale-{size}.log"
    log(f"{size}: {nms} NMs, {gpus} GPUs, {apps} apps ({gpu_apps} with GPU asks, their "
        f"agents in {procs} process(es)); Maven output in {logfile}")
    started = time.time()
    with open(logfile, "w") as lf:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            lf.write(line)
            if line.startswith("[scale-bench") or "BUILD" in line or "ERROR]" in line:
                print(line.rstrip()[:400], file=sys.stderr, flush=True)
        rc = proc.wait()
    if rc != 0 or not out.exists():
        why = maven_failure(logfile.read_text(errors="replace"), args.offline)
        raise RuntimeError(f"size {size}: the benchmark failed (exit {rc}){why}; see {logfile}")
    raw = json.loads(out.read_text())
    text = logfile.read_text()
    raw["engine_rounds"] = engine_rounds(text)
    # without the C extensions (python setup.py build_ext) the engine's LP runs in pure Python
    raw["engine_compiled_parts"] = "compiled parts missing" not in text
    raw["cpus"] = None if args.cpus is None else {"rm": args.cpus[0], "agents": args.cpus[1]}
    return summarise(raw, size, time.time() - started)


def maven_failure(log_text: str, offline: bool) -> str:
    """The first line of Maven's own error in ``log_text`` (': ' + it, else ''), with what to
    do when an offline run missed an artifact that was never downloaded."""
    first = next((ln.removeprefix("[ERROR]").strip() for ln in log_text.splitlines()
                  if ln.startswith("[ERROR]") and ln.removeprefix("[ERROR]").strip()), "")
    if not first:
        return ""
    hint = ""
    if offline and ("offline" in first or "has not been downloaded" in first):
        hint = " (an artifact is missing from ~/.m2: run once without --offline)"
    return f": {first[:300]}{hint}"


ROUND_LINE = re.compile(r"\[engine \d+\] .* INFO round (\d+): (\{.*\})\s*$")


def engine_rounds(log_text: str) -> list[dict[str, Any]]:
    """Each auction round of the engine (its log line, themis.yarn.rounds): GPUs offered,
    bidders, and where its time went (prepare, bid wait, the rest: auction, leftover,
    allocation notices)."""
    out = []
    for line in log_text.splitlines():
        m = ROUND_LINE.search(line)
        if not m:
            continue
        try:
            info = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            continue
        if not isinstance(info, dict) or info.get("skipped") or "bid_wait_ms" not in info:
            continue
        elapsed = float(info["elapsed_ms"])
        auction = info.get("auction_ms")  # absent in engines before it was logged
        out.append({"round": int(m.group(1)), "offered_gpus": info.get("offered_gpus"),
                    "bidders": len(info.get("bidders", [])),
                    "elapsed_ms": round(elapsed, 1), "prepare_ms": round(info["prepare_ms"], 1),
                    "bid_wait_ms": round(info["bid_wait_ms"], 1),
                    "auction_ms": None if auction is None else round(float(auction), 2),
                    "rest_ms": round(elapsed - info["prepare_ms"] - info["bid_wait_ms"], 1)})
    return out


def _median(xs: list[float]) -> float | None:
    """The lower median (as ScaleBench's figures), None for no values."""
    s = sorted(xs)
    return s[(len(s) - 1) // 2] if s else None


def auction_share(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The auction's share of the engine's round: per round in which apps bid (and the
    engine logged ``auction_ms``), auction ms / the round's elapsed ms; medians of the share,
    of the auction's and of the round's time. Rounds without bidders run no auction."""
    bid = [r for r in rounds if r.get("bidders") and r.get("auction_ms") is not None
           and r.get("elapsed_ms", 0) > 0]
    med_share = _median([r["auction_ms"] / r["elapsed_ms"] for r in bid])
    return {"rounds": len(rounds), "rounds_with_bids": len(bid),
            "median": None if med_share is None else round(med_share, 4),
            "auction_ms_median": _median([float(r["auction_ms"]) for r in bid]),
            "round_ms_median": _median([float(r["elapsed_ms"]) for r in bid]),
            "bid_wait_ms_median": _median([float(r["bid_wait_ms"]) for r in bid])}


def summary_line(result: dict[str, Any]) -> dict[str, Any]:
    """The per-size headline: expiry -> lease granted and -> container committed (median,
    p95, n) and the auction's share of a round (median)."""
    if "error" in result:
        return {"size": result["size"], "error": result["error"]}
    e = result["lease_expiry"]

    def pick(d: dict[str, Any] | None) -> dict[str, Any]:
        d = d or {}
        return {"median": d.get("median"), "p95": d.get("p95"), "n": d.get("n")}

    return {"size": result["size"], "agent_procs": result.get("agent_procs"),
            "expiry_to_grant_ms": pick(e.get("to_grant_ms")),
            "expiry_to_commit_ms": pick(e.get("to_commit_ms")),
            "expiries": e.get("expiries"), "renewed_in_place": e.get("renewed_in_place"),
            "granted_before_expiry": e.get("granted_before_expiry"),
            "auction_share_median": result["auction_share"]["median"],
            "nongpu_ratio": result["nongpu_per_s"]["ratio"]}


def summarise(raw: dict[str, Any], size: str, wall_s: float) -> dict[str, Any]:
    stock, themis = raw["stock"], raw["themis"]
    t = themis.get("lease_turnover", {})
    ratio = themis["nongpu_per_s"] / stock["nongpu_per_s"] if stock["nongpu_per_s"] else None
    overhead = themis["rm_heap_mb"] - stock["rm_heap_mb"]
    commit = t.get("expiry_to_commit_ms", {})
    return {
        "size": size,
        "setup": raw["setup"],
        "order": raw.get("order"),
        "agent_procs": raw["setup"].get("agent_procs"),
        "cpus": raw.get("cpus"),  # --split-cpus: the RM side's and the agents' CPUs
        "agents_registered": _json_or_none(themis.get("agents_registered")),
        "wall_s": round(wall_s, 1),
        "nongpu_per_s": {"stock": round(stock["nongpu_per_s"], 1),
                         "themis": round(themis["nongpu_per_s"], 1),
                         "ratio": None if ratio is None else round(ratio, 3),
                         "target_ratio": 0.95,
                         "met": ratio is not None and ratio >= 0.95},
        "lease_expiry": {
            "expiries": t.get("expiries"), "unserved": t.get("unserved"),
            # renewal in place: leases whose holder won them back before they ended (not
            # expiries: their containers run on), and ends whose node was granted again
            # before the end (counted at 0 ms)
            "renew_ahead_ms": t.get("renew_ahead_ms"),
            "renewed_in_place": t.get("renewed_in_place"),
            "renewed_before_expiry_ms": t.get("renewed_before_expiry_ms"),
            "granted_before_expiry": t.get("granted_before_expiry"),
            "to_grant_ms": t.get("expiry_to_grant_ms"), "to_commit_ms": commit,
            # no lease ended (every one renewed in place): nothing waited
            "met": (not commit.get("n") and not t.get("expiries")
                    and bool(t.get("renewed_in_place")))
            or (bool(commit.get("n")) and commit.get("median", 1e9) <= 1000
                and commit.get("p95", 1e9) <= 3000),
            "where": {k: t.get(k) for k in ("round_in_rm_ms", "engine_round_ms",
                                            "freed_to_grant_ms", "freed_round_delay_ms",
                                            "monitor_interval_ms", "rounds")},
        },
        "rm_heap_mb": {"stock": stock["rm_heap_mb"], "themis": themis["rm_heap_mb"],
                       "overhead": overhead, "target_overhead": 200, "met": overhead <= 200},
        "engine_compiled_parts": raw.get("engine_compiled_parts"),
        "auction_share": auction_share(raw.get("engine_rounds", [])),
        "engine_rounds": raw.get("engine_rounds", []),
        "engine_rss_mb": themis.get("engine_rss_mb"),
        "engine_peak_rss_mb": themis.get("engine_peak_rss_mb"),
        "agents_rss_mb": themis.get("agents_rss_mb"),  # every agent process's
        "raw": raw,
    }


def _json_or_none(text: object) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    results = []
    load_before = os.getloadavg()
    for size in args.size_list:
        try:
            results.append(run_size(args, size))
        except RuntimeError as exc:
            log(str(exc))
            results.append({"size": size, "error": str(exc)})
        log(f"{size}: {json.dumps(summary_line(results[-1]))}")
    doc = {
        "command": "python bench/bench_scale.py " + " ".join(sys.argv[1:] if argv is None
                                                                else argv),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "summary": [summary_line(r) for r in results],
        "results": results,
    }
    print(json.dumps(doc, indent=2))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
