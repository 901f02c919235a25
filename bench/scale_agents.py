"""Many Themis agents in one or several processes, for the scale benchmark (bench/bench_scale.py).

Each app id read from ``--apps-file`` (one per line, optionally followed by whitespace and the
registration token its agent sends: the AM's encoded AMRMToken under YARN) gets the real
agent code: an
:class:`~themis.agent.client.AgentClient` speaking the gRPC arbiter protocol
(RegisterApp, Events, SubmitBid, ReportRho) with a :class:`~themis.mechanism.bidder.ModelBidder`
on a synthetic single-job app of ``--demand`` GPUs. In a real cluster every agent runs inside
its own AM on its own host; here ``--procs N`` splits the ids into N contiguous groups (sizes
differing by at most one) and runs each group in its own child process (this script with
``--procs 1``), each with its own gRPC channel, so N groups parse offers and build bid tables
in parallel. Within one process all clients share one channel (one HTTP/2 connection; each app
still has its own stream and credentials), so a thousand apps fit in one process.

Stdout (JSON lines only): ``{"event": "registered", "n": N, "s": seconds}`` once every agent
has its Hello, then ``{"event": "stats", ...}`` every ``--stats-s`` seconds and at exit. With
``--procs N > 1`` the parent merges its children's lines: one ``registered`` line once every
child's agents registered (``n`` summed, ``s`` the slowest child's), ``stats`` with the
counters summed over the children (``rss_mb`` includes the parent's own) and ``procs``.
Exits when stdin closes (the benchmark's JVM went away), on SIGTERM or after ``--timeout-s``;
the parent then closes its children's stdin and kills any child still running.

``THEMIS_BENCH_AGENT_CPUS`` (a CPU list as ``taskset -c`` takes it, e.g. ``1`` or ``2-3``):
run on those CPUs only, the children too (``bench_scale.py --split-cpus``: the agents off the
RM's cores, as on a cluster where the AMs run on other hosts).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import grpc

from themis.agent.client import AgentClient
from themis.mechanism.bidder import ModelBidder
from themis.mechanism.model import AppModel, Job

T = TypeVar("T")


def _emit(kind: str, **fields: object) -> None:
    print(json.dumps({"event": kind, **fields}), flush=True)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python bench/scale_agents.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arbiter", required=True,
                   help="host:port of the engine's agents' endpoint (127.0.0.1 only)")
    p.add_argument("--apps-file", required=True, type=Path,
                   help="file with one YARN application id per line, optionally followed by "
                   "a space and the app's registration token")
    p.add_argument("--demand", type=int, default=4,
                   help="most GPUs each synthetic job can use (default 4)")
    p.add_argument("--iters", type=float, default=1e6,
                   help="iterations left per job, 1 s each on one GPU (default 1e6)")
    p.add_argument("--register-timeout-s", type=float, default=300.0,
                   help="give up when not every agent registered by then (default 300)")
    p.add_argument("--stats-s", type=float, default=10.0,
                   help="seconds between stats lines (default 10)")
    p.add_argument("--timeout-s", type=float, default=3600.0,
                   help="exit after this many seconds at the latest (default 3600)")
    p.add_argument("--procs", type=int, default=1,
                   help="agent processes: the ids are split into this many groups, each run "
                   "by a child process with its own gRPC channel (default 1: every agent in "
                   "this process; capped at the number of ids)")
    args = p.parse_args(argv)
    if args.demand < 1 or args.iters <= 0 or args.procs < 1:
        p.error("--demand and --procs must be >= 1 and --iters > 0")
    return args


# counters of a stats line that add up over processes
SUMMED = ("agents", "offers", "bids", "bids_rejected", "allocations", "reconnects")


def parse_apps(text: str) -> list[tuple[str, str]]:
    """``--apps-file``'s lines as (app id, registration token; "" when absent), blank lines
    skipped."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if parts:
            out.append((parts[0], parts[1] if len(parts) > 1 else ""))
    return out


def split_ids(ids: Sequence[T], procs: int) -> list[list[T]]:
    """``ids`` in ``min(procs, len(ids))`` contiguous groups, in order, whose sizes differ by
    at most one (the first ``len(ids) % groups`` groups hold one more); no group is empty."""
    if procs < 1:
        raise ValueError(f"procs must be >= 1, not {procs}")
    n = min(procs, len(ids))
    if n == 0:
        return []
    size, extra = divmod(len(ids), n)
    out: list[list[T]] = []
    start = 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(list(ids[start:end]))
        start = end
    return out


def merge_registered(lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One ``registered`` line for every child's: agents summed, the slowest child's time."""
    if not lines or any(x.get("event") != "registered" for x in lines):
        raise ValueError("merge_registered needs one registered line per process")
    return {"event": "registered", "n": sum(int(x["n"]) for x in lines),
            "s": max(float(x["s"]) for x in lines), "procs": len(lines)}


def merge_stats(lines: Sequence[Mapping[str, Any]], own_rss_mb: float = 0.0,
                final: bool = False) -> dict[str, Any]:
    """One ``stats`` line for the children's latest ones: counters summed, ``rss_mb`` the
    children's plus ``own_rss_mb`` (a child that could not read its RSS, -1, counts 0),
    ``rss_mb_max`` the largest child's, ``procs`` how many children reported."""
    out: dict[str, Any] = {"event": "stats"}
    if final:
        out["final"] = True
    for k in SUMMED:
        out[k] = sum(int(x.get(k, 0)) for x in lines)
    rss = [float(x.get("rss_mb", -1.0)) for x in lines]
    out["rss_mb"] = round(sum(r for r in rss if r > 0) + max(0.0, own_rss_mb), 1)
    out["rss_mb_max"] = max(rss, default=-1.0)
    out["procs"] = len(lines)
    return out


def _stats(clients: list[AgentClient]) -> dict[str, object]:
    return {
        "agents": len(clients),
        "offers": sum(c.stats.offers for c in clients),
        "bids": sum(c.stats.bids_sent for c in clients),
        "bids_rejected": sum(c.stats.bids_rejected for c in clients),
        "allocations": sum(c.stats.allocations for c in clients),
        "reconnects": sum(c.stats.reconnects for c in clients),
        "rss_mb": _rss_mb(),
    }


def _rss_mb() -> float:
    """This process's resident set now (ru_maxrss would count the forking JVM's)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        pass
    return -1.0


def stdin_closed() -> threading.Event:
    """An event set once stdin closes (the benchmark's JVM went away), watched by a
    daemon thread."""
    gone = threading.Event()

    def _watch() -> None:
        sys.stdin.read()
        gone.set()

    threading.Thread(target=_watch, daemon=True).start()
    return gone


def _child_cmd(args: argparse.Namespace, apps_file: Path) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--arbiter", args.arbiter,
            "--apps-file", str(apps_file), "--demand", str(args.demand),
            "--iters", str(args.iters), "--register-timeout-s", str(args.register_timeout_s),
            "--stats-s", str(args.stats_s), "--timeout-s", str(args.timeout_s),
            "--procs", "1"]


def _read_lines(i: int, stream: IO[str], q: queue.Queue[tuple[int, dict[str, Any] | None]]
                ) -> None:
    """Child ``i``'s JSON lines into ``q``; ``(i, None)`` when its stdout closes."""
    for line in stream:
        try:
            obj = json.loads(line)
        except ValueError:
            print(f"scale_agents: child {i}: not JSON: {line.rstrip()[:200]}", file=sys.stderr)
            continue
        if isinstance(obj, dict):
            q.put((i, obj))
    q.put((i, None))


def run_procs(args: argparse.Namespace, groups: list[list[tuple[str, str]]]) -> int:
    """Run each group in a child process (its own interpreter and gRPC channel) and merge
    their lines onto stdout (module doc). Every child is gone when this returns."""
    procs: list[subprocess.Popen[str]] = []
    q: queue.Queue[tuple[int, dict[str, Any] | None]] = queue.Queue()
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="scale-agents-") as tmp:
        try:
            for i, group in enumerate(groups):
                f = Path(tmp) / f"apps-{i}.txt"
                f.write_text("".join(f"{a} {t}".rstrip() + "\n" for a, t in group))
                p = subprocess.Popen(_child_cmd(args, f), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
                procs.append(p)
                assert p.stdout is not None
                threading.Thread(target=_read_lines, args=(i, p.stdout, q),
                                 daemon=True).start()
            registered: dict[int, dict[str, Any]] = {}
            latest: dict[int, dict[str, Any]] = {}
            closed: set[int] = set()
            # children give up on their own at --register-timeout-s; a margin for their start
            deadline = start + args.register_timeout_s + 60.0
            while len(registered) < len(procs):
                try:
                    i, obj = q.get(timeout=max(0.0, deadline - time.time()))
                except queue.Empty:
                    print(f"scale_agents: {len(procs) - len(registered)} of {len(procs)} "
                          "agent processes did not register in time", file=sys.stderr)
                    return 1
                if obj is None:
                    closed.add(i)
                    if i not in registered:
                        print(f"scale_agents: agent process {i} exited before registering "
                              f"(exit {procs[i].wait()})", file=sys.stderr)
                        return 1
                elif obj.get("event") == "registered":
                    registered[i] = obj
                elif obj.get("event") == "stats":
                    latest[i] = obj
            line = merge_registered([registered[i] for i in sorted(registered)])
            line["s"] = round(max(line["s"], time.time() - start), 3)
            print(json.dumps(line), flush=True)
            gone = stdin_closed()
            end = start + args.timeout_s
            next_stats = time.time() + args.stats_s
            while not gone.is_set() and time.time() < end and len(closed) < len(procs):
                try:
                    i, obj = q.get(timeout=max(0.0, min(0.2, next_stats - time.time())))
                    if obj is None:
                        closed.add(i)
                        print(f"scale_agents: agent process {i} exited (exit "
                              f"{procs[i].wait()})", file=sys.stderr)
                    elif obj.get("event") == "stats":
                        latest[i] = obj
                except queue.Empty:
                    pass
                if time.time() >= next_stats:
                    next_stats += args.stats_s
                    print(json.dumps(merge_stats([latest[i] for i in sorted(latest)],
                                                 _rss_mb())), flush=True)
            # ask every child to stop (stdin closed), collect their final lines
            for p in procs:
                if p.stdin is not None:
                    with contextlib.suppress(OSError):
                        p.stdin.close()
            stop_by = time.time() + 10.0
            while len(closed) < len(procs):
                try:
                    i, obj = q.get(timeout=max(0.0, stop_by - time.time()))
                except queue.Empty:
                    break
                if obj is None:
                    closed.add(i)
                elif obj.get("event") == "stats":
                    latest[i] = obj
            print(json.dumps(merge_stats([latest[i] for i in sorted(latest)], _rss_mb(),
                                         final=True)), flush=True)
            failed = [i for i, p in enumerate(procs) if p.poll() not in (0, None)]
            return 1 if failed else 0
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                try:
                    p.wait(timeout=10.0)
                except subprocess.TimeoutExpired:
                    print(f"scale_agents: agent process {p.pid} did not exit after kill",
                          file=sys.stderr)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # so that run_procs' finally kills the children


def cpu_list(text: str) -> set[int]:
    """CPUs of a list as ``taskset -c`` takes it: ``0``, ``0,2``, ``1-3`` (ValueError else)."""
    cpus: set[int] = set()
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"CPU list {text!r}: {part!r} is not N or N-M")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first:
            raise ValueError(f"CPU list {text!r}: {part!r} runs backwards")
        cpus.update(range(first, last + 1))
    return cpus


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    pinned = os.environ.get("THEMIS_BENCH_AGENT_CPUS", "")
    if pinned:
        try:
            os.sched_setaffinity(0, cpu_list(pinned))
        except (ValueError, OSError) as exc:
            print(f"scale_agents: THEMIS_BENCH_AGENT_CPUS={pinned!r}: {exc}", file=sys.stderr)
            return 2
    try:
        apps = parse_apps(args.apps_file.read_text())
    except OSError as exc:
        print(f"scale_agents: cannot read --apps-file: {exc}", file=sys.stderr)
        return 2
    if not args.arbiter.startswith("127.0.0.1:"):
        print(f"scale_agents: --arbiter {args.arbiter!r}: only 127.0.0.1 is allowed",
              file=sys.stderr)
        return 2
    groups = split_ids(apps, args.procs)
    if len(groups) > 1:
        signal.signal(signal.SIGTERM, _terminate)
        return run_procs(args, groups)
    channel = grpc.insecure_channel(args.arbiter)
    start = time.time()
    clients = []
    for i, (app_id, token) in enumerate(apps):
        model = AppModel(app_id, start, [Job(f"{app_id}-job", 1.0, args.iters, args.demand,
                                             args.iters)])
        clients.append(AgentClient(args.arbiter, app_id, ModelBidder(model, time.time),
                                   channel=channel, seed=i, registration_token=token).start())
    deadline = start + args.register_timeout_s
    for c in clients:
        if not c.connected.wait(max(0.0, deadline - time.time())):
            print(f"scale_agents: {c.app_id} did not register within "
                  f"{args.register_timeout_s} s ({c.stats.last_error})", file=sys.stderr)
            return 1
    _emit("registered", n=len(clients), s=round(time.time() - start, 3))
    gone = stdin_closed()
    end = start + args.timeout_s
    while not gone.wait(max(0.0, min(args.stats_s, end - time.time()))):
        _emit("stats", **_stats(clients))
        if time.time() >= end:
            break
    for c in clients:
        c.stop(unregister=False, timeout=0.5)
    _emit("stats", final=True, **_stats(clients))
    channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
