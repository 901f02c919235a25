"""``themis preview``: replay a cluster's own history under its current policy and under
Themis, and report both (docs/preview.md). ``themis preview --help`` explains every option
with its default."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from themis.mechanism.round import DEFAULT_FAIRNESS_KNOB
from themis.preview.cluster import (
    SCHEDULER_POLICY,
    Current,
    NodesInfo,
    current_from_conf,
    current_from_scheduler,
    current_given,
    topology_from_nodes,
    uniform_topology,
)
from themis.preview.history import PreviewError, parse_json, read_apps, read_file
from themis.preview.jobrecords import DirRecords, HdfsRecords, RecordSource, read_records
from themis.preview.replay import THEMIS, ReplayConfig, replay_all
from themis.preview.rm import Rm
from themis.preview.trace import RUNTIME_FROM, Window, select, to_workload, with_records
from themis.sim.engine import SimResult

DEFAULT_RM = "http://127.0.0.1:8088"
DEFAULT_STATES = "FINISHED,FAILED,KILLED"
DESCRIPTION = """\
Preview Themis on a cluster before switching to it: read the cluster's finished
applications from the ResourceManager's REST API (GET /ws/v1/cluster/apps, as your user:
SPNEGO with your Kerberos ticket on a secure cluster) or from a saved response body
(--apps-file), turn every app that used GPUs into a simulator app (its arrival, its
GPU-seconds, its GPU demand inferred from GPU-seconds / runtime), and replay that trace
in the simulator on the cluster's GPUs under the policy the cluster runs today (FIFO for
the CapacityScheduler, fair share for the FairScheduler) and under Themis, with the same
leases and restart cost.

Writes OUT/report.html (self-contained: rho per app under each policy, its CDF, the worst
apps, GPU time and average JCT, and the calibration: the observed JCT against the replay
of today's policy), OUT/summary.json and OUT/apps.json (one row per app, inferred fields
flagged). Prints one line per policy, or with --json only the summary's JSON. Progress
and notes go to stderr.

Exit status: 0 done; 2 bad options, an unreachable or refusing RM, an empty window, a
malformed or truncated response file; 1 the replay failed (a defect: please report)."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "preview",
        help="replay the cluster's own history under Themis and its current policy",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(p)
    p.set_defaults(func=run_cli)
    return p


def configure(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("the history")
    src.add_argument(
        "--rm", default=None, metavar="URL",
        help="the ResourceManager's web address, for the apps (unless --apps-file), its "
        "nodes (unless --gpus or --nodes-file) and its scheduler (unless --current or "
        f"--scheduler-file) (default: $THEMIS_RM_URL, else {DEFAULT_RM}; with --apps-file: "
        "no RM)")
    src.add_argument(
        "--user", default=None,
        help="the user named to an RM without Kerberos (default: $HADOOP_USER_NAME, else "
        "your login name); on a Kerberos cluster your ticket (kinit) says who you are")
    src.add_argument(
        "--apps-file", type=Path, default=None, metavar="FILE",
        help="a saved body of GET /ws/v1/cluster/apps (JSON: {\"apps\": {\"app\": [...]}}) "
        "instead of asking the RM (default: ask the RM)")
    src.add_argument(
        "--states", default=DEFAULT_STATES, metavar="S,...",
        help="YARN states of the apps replayed (default: %(default)s)")
    src.add_argument(
        "--since", default=None, metavar="TIME",
        help="only apps started at or after TIME: an ISO date or time (UTC unless it has "
        "an offset: 2026-11-01, 2026-11-01T08:00, 2026-11-01T08:00+01:00), ms since the "
        "epoch, or a span before now (90m, 12h, 7d, 2w) (default: no lower bound)")
    src.add_argument(
        "--until", default=None, metavar="TIME",
        help="only apps started before TIME, same forms as --since (default: no upper "
        "bound)")
    src.add_argument(
        "--runtime-from", choices=RUNTIME_FROM, default="elapsed",
        help="the runtime that GPU demand is inferred with, round(GPU-seconds / runtime): "
        "elapsed = finishedTime - startedTime; launch = finishedTime - launchTime (leaves out "
        "the wait for the AM container) (default: %(default)s)")
    src.add_argument(
        "--timeout", type=_positive, default=60.0, metavar="S",
        help="seconds to wait for each answer of the RM (default: %(default)s)")
    src.add_argument(
        "--job-records", default="auto", metavar="auto|off|DIR",
        help="where Themis apps' job records (their AM's spec.json and state.json: jobs, "
        "GPUs, steps, Hyperband phases) are read, to replay those apps with their jobs: "
        "auto = HDFS over WebHDFS (--webhdfs) when the history comes from the RM or "
        "--webhdfs is given; DIR = saved copies, DIR/<app id>/{spec,state}.json; off = "
        "none, every app is one job (default: %(default)s)")
    src.add_argument(
        "--webhdfs", default=None, metavar="URL",
        help="the NameNode's web address for --job-records auto (default: "
        "$THEMIS_WEBHDFS_URL, else the host of the RM's fs.defaultFS at port 9870)")

    cl = p.add_argument_group("the cluster")
    cl.add_argument(
        "--gpus", type=_count, default=None, metavar="N",
        help="replay on N GPUs instead of the RM's nodes (GET /ws/v1/cluster/nodes); "
        "needed with --apps-file unless --nodes-file or --rm is given (default: the RM's "
        "nodes)")
    cl.add_argument(
        "--gpus-per-node", type=_count, default=8, metavar="K",
        help="with --gpus: K GPUs per node, one rack (default: %(default)s)")
    cl.add_argument(
        "--nodes-file", type=Path, default=None, metavar="FILE",
        help="a saved body of GET /ws/v1/cluster/nodes instead of asking the RM "
        "(default: none)")
    cl.add_argument(
        "--current", choices=tuple(SCHEDULER_POLICY), default=None,
        help="the scheduler the cluster runs today: capacity and fifo replay as the "
        "simulator's fifo policy, fair as fairshare (default: read from the RM's "
        "/ws/v1/cluster/scheduler, else its /conf; without an RM: capacity, YARN's "
        "default)")
    cl.add_argument(
        "--scheduler-file", type=Path, default=None, metavar="FILE",
        help="a saved body of GET /ws/v1/cluster/scheduler instead of asking the RM "
        "(default: none)")

    rp = p.add_argument_group("the replay")
    rp.add_argument(
        "--fairness-knob", type=_knob, default=DEFAULT_FAIRNESS_KNOB, metavar="F",
        help="Themis' f in [0, 1): the (1-f) fraction of apps with the worst rho bid in "
        "each round (default: %(default)s)")
    rp.add_argument(
        "--lease-minutes", type=_positive, default=10.0, metavar="M",
        help="GPU lease length of the replay, under both policies (default: %(default)s)")
    rp.add_argument(
        "--restart-seconds", type=_nonneg, default=35.0, metavar="S",
        help="checkpoint/restart pause of a job whose GPUs change, also at its start, under "
        "both policies (default: %(default)s)")
    rp.add_argument("--seed", type=int, default=0,
                    help="seed of the policies' random choices (default: %(default)s)")
    rp.add_argument(
        "--processes", type=_count, default=None, metavar="N",
        help="run the replays at once in up to N worker processes (the results are the "
        "same); 1: one after the other in this process (default: one per replay, at most "
        "one per CPU)")

    out = p.add_argument_group("the report")
    out.add_argument("--out", type=Path, required=True, metavar="DIR",
                     help="output directory, created if missing (required)")
    out.add_argument("--worst", type=_count, default=10, metavar="N",
                     help="how many of the worst apps the report names per policy "
                     "(default: %(default)s)")
    out.add_argument("--json", action="store_true",
                     help="print only summary.json's JSON on stdout (default: one line per "
                     "policy)")
    out.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                     help="a progress bar per replay on stderr (default: on)")


def _number(text: str, ok: Callable[[float], bool], what: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not ok(v) or v != v or v in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} must be {what}")
    return v


def _positive(text: str) -> float:
    return _number(text, lambda v: v > 0, "a finite number > 0")


def _nonneg(text: str) -> float:
    return _number(text, lambda v: v >= 0, "a finite number >= 0")


def _knob(text: str) -> float:
    return _number(text, lambda v: 0 <= v < 1, "in [0, 1)")


def _count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= v <= 10**6:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [1, 1000000]")
    return v


_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_time(text: str, option: str, now_ms: int) -> int:
    """A time in ms since the epoch (see --since's help)."""
    t = text.strip()
    m = _SPAN.fullmatch(t)
    if m:
        return now_ms - round(float(m.group(1)) * _UNIT_S[m.group(2)] * 1000)
    if t.isdigit():
        return int(t)
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        raise PreviewError(option, f"{text[:60]!r} is not a time: an ISO date or time "
                                   "(2026-11-01, 2026-11-01T08:00Z), ms since the epoch or a "
                                   "span before now (12h, 7d)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return round(dt.timestamp() * 1000)


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def note(text: str) -> None:
    print(f"themis preview: {text}", file=sys.stderr, flush=True)


@dataclass
class Timer:
    """Seconds per stage (wall clock), added up over the stage's blocks."""

    stages: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.stages[stage] = self.stages.get(stage, 0.0) + time.perf_counter() - t0


@dataclass
class Outcome:
    summary: dict[str, Any]
    paths: dict[str, Path]
    results: dict[str, SimResult]


def preview(args: argparse.Namespace) -> Outcome:
    """Everything but printing (raises PreviewError for input it cannot use)."""
    from themis.preview import report

    timer = Timer()
    now_ms = int(time.time() * 1000)
    if args.job_records not in ("auto", "off"):
        _records_dir(args.job_records)  # a bad option is said before any work
    window = Window(
        parse_time(args.since, "--since", now_ms) if args.since else None,
        parse_time(args.until, "--until", now_ms) if args.until else None,
    )
    rm_url = args.rm if args.rm or args.apps_file else (os.environ.get("THEMIS_RM_URL")
                                                        or DEFAULT_RM)
    rm = None
    if rm_url:
        from themis.identity.http import login_user

        rm = Rm(rm_url, args.user or login_user(), timeout_s=args.timeout)

    # the history
    if args.apps_file is not None:
        source = str(args.apps_file)
        with timer("read"):
            data = read_file(args.apps_file)
    else:
        assert rm is not None
        source = f"{rm.url}/ws/v1/cluster/apps"
        with timer("read"):
            data = rm.apps(args.states, window)
    with timer("parse"):
        history = read_apps(parse_json(data, source), source)

    nodes = cluster(args, rm)
    current = current_policy(args, rm)
    note(f"cluster: {len(nodes.topology)} GPUs on {nodes.nodes} nodes (from {nodes.source});"
         f" current policy {current.policy} ({current.scheduler} scheduler, from "
         f"{current.source})")

    states = [s for s in args.states.split(",") if s.strip()]
    with timer("trace"):
        selection = select(history, states=states, window=window,
                           cluster_gpus=len(nodes.topology), runtime_from=args.runtime_from)
    left = ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in selection.left_out.items() if v)
    window_text = (f"startedTime in [{_iso(window.since_ms)}, {_iso(window.until_ms)})"
                   if window.since_ms is not None or window.until_ms is not None
                   else "every app the response holds")
    if not selection.apps:
        raise PreviewError(source, f"no app to replay: none of the {len(history):,} apps is "
                                   f"finished, in {args.states}, in the window "
                                   f"({window_text}) and with GPU-seconds"
                                   + (f" (left out: {left})" if left else ""))
    with timer("records"):
        records_from = record_source(args, rm)
        found = read_records([s.app for s in selection.apps], records_from)
        selection = with_records(selection, found.by_app, len(nodes.topology))
    if any(found.outcomes.values()):
        note("job records of Themis apps: " + ", ".join(
            f"{v:,} {k}" for k, v in found.outcomes.items() if v)
            + "".join(f"\n  {a}: {why}" for a, why in list(found.problems.items())[:5]))
    with timer("trace"):
        workload = to_workload(selection)
    note(f"{len(history):,} apps read from {source}; {len(selection.apps):,} replayed"
         + (f" (left out: {left})" if left else ""))

    config = ReplayConfig(fairness_knob=args.fairness_knob, lease_minutes=args.lease_minutes,
                          restart_seconds=args.restart_seconds, seed=args.seed)
    with timer("replays"):
        results, wall = replay_all([current.policy, THEMIS], nodes.topology, workload,
                                   config, progress=args.progress, processes=args.processes)
    for policy, seconds in wall.items():  # each replay's own, when they ran at once too
        timer.stages[f"replay_{policy}"] = seconds

    title = (f"{len(selection.apps):,} apps from {source}, {len(nodes.topology)} GPUs, "
             f"{_iso(min(s.app.started_ms for s in selection.apps))} to "
             f"{_iso(max(s.app.finished_ms for s in selection.apps))}")
    context = {
        "tool": "themis preview",
        "version": _version(),
        "generated_at": _iso(now_ms),
        "source": {"apps": source, "states": states,
                   "window": {"since_ms": window.since_ms, "until_ms": window.until_ms},
                   "window_text": window_text, "runtime_from": args.runtime_from,
                   "job_records": {"from": records_from.name if records_from else None,
                                   **found.outcomes}},
        "cluster": nodes.to_dict(),
        "current": current.to_dict(),
        "config": config.to_dict(),
    }

    with timer("report"):
        rows = report.per_app_rows(selection, results)
        summary = report.build_summary(selection, results, current=current.policy, rows=rows,
                                       worst=args.worst, context=context)
        figures = report.plots(results, selection, current.policy, title)
    summary["files"] = {k: str(v) for k, v in report.output_paths(args.out).items()}
    summary["timings_s"] = dict(timer.stages)  # what writing the files takes is left out
    with timer("report"):
        page = report.render_html(summary, rows, figures, title)
        paths = report.write(args.out, summary, rows, page)
    summary["timings_s"] = dict(timer.stages)
    return Outcome(summary, paths, results)


def _records_dir(text: str) -> Path:
    root = Path(text)
    if not root.is_dir():
        raise PreviewError("--job-records", f"{root} is not a directory (auto, off or a "
                                            f"directory of saved records)")
    return root


def record_source(args: argparse.Namespace, rm: Rm | None) -> RecordSource | None:
    """Where Themis apps' job records are read (``--job-records``, ``--webhdfs``)."""
    if args.job_records == "off":
        return None
    if args.job_records != "auto":
        return DirRecords(_records_dir(args.job_records))
    live = rm is not None and args.apps_file is None  # the history comes from the RM
    url = args.webhdfs or (os.environ.get("THEMIS_WEBHDFS_URL") if live else None)
    if url is None and live:
        assert rm is not None
        try:
            fs = rm.conf().get("fs.defaultFS", "")
        except PreviewError as exc:
            note(f"job records not read: the NameNode is unknown ({exc}); give --webhdfs")
            return None
        host = urllib.parse.urlsplit(fs).hostname if fs.startswith("hdfs://") else None
        if host is None:
            note(f"job records not read: fs.defaultFS is {fs!r}, not HDFS; give --webhdfs")
            return None
        url = f"http://{host}:9870"
    if url is None:
        return None
    from themis.identity.http import login_user

    return HdfsRecords(url, args.user or login_user(), timeout_s=args.timeout)


def cluster(args: argparse.Namespace, rm: Rm | None) -> NodesInfo:
    if args.gpus is not None:
        return uniform_topology(args.gpus, args.gpus_per_node)
    if args.nodes_file is not None:
        src = str(args.nodes_file)
        return topology_from_nodes(parse_json(read_file(args.nodes_file), src), src)
    if rm is None:
        raise PreviewError("--apps-file", "the cluster's GPUs are unknown: give --gpus N "
                                          "(and --gpus-per-node K), --nodes-file FILE or --rm "
                                          "URL")
    src = f"{rm.url}/ws/v1/cluster/nodes"
    return topology_from_nodes(parse_json(rm.nodes(), src), src)


def current_policy(args: argparse.Namespace, rm: Rm | None) -> Current:
    if args.current is not None:
        return current_given(args.current, "--current")
    if args.scheduler_file is not None:
        src = str(args.scheduler_file)
        return current_from_scheduler(parse_json(read_file(args.scheduler_file), src), src)
    if rm is None:
        return current_given("capacity", "default: no RM, --current or --scheduler-file "
                                         "(YARN's default scheduler)")
    src = f"{rm.url}/ws/v1/cluster/scheduler"
    try:
        body = rm.scheduler()
    except PreviewError as first:
        try:
            return current_from_conf(rm.conf(), f"{rm.url}/conf")
        except PreviewError:
            raise first from None
    return current_from_scheduler(parse_json(body, src), src)


def _version() -> str:
    from themis import __version__

    return __version__


def run_cli(args: argparse.Namespace) -> int:
    from themis.identity.http import AuthError
    from themis.mechanism.solvers import SolverError
    from themis.sim.errors import SimError
    from themis.stdio import stdout_to_stderr

    try:
        with stdout_to_stderr():  # stdout carries the result only (themis.stdio)
            outcome = preview(args)
    except (PreviewError, AuthError) as exc:
        print(f"themis preview: error: {exc}", file=sys.stderr)
        return 2
    except (SimError, SolverError) as exc:
        print(f"themis preview: the replay failed (a defect: please report): {exc}",
              file=sys.stderr)
        return 1
    s = outcome.summary
    if args.json:
        from themis.preview.report import finite

        print(json.dumps(finite(s), indent=2, allow_nan=False))
        return 0
    for name, m in s["policies"].items():
        print(f"{name:10s} max_rho={m['max_rho']:.2f} p99_rho={m['p99_rho']:.2f} "
              f"median_rho={m['median_rho']:.2f} rho>1={m['frac_rho_gt_1']:.1%} "
              f"gpu_h={m['gpu_time_hours']:.0f} avg_jct_h={m['avg_jct_hours']:.2f}")
    c = s["calibration"]
    print(f"{'observed':10s} gpu_h={s['observed']['gpu_time_hours']:.0f} "
          f"avg_jct_h={s['observed']['avg_jct_hours']:.2f}; replay of {c['policy']}: median "
          f"|JCT error| {c['median_abs_rel_error']:.1%}, worst {c['worst_abs_rel_error']:.1%} "
          f"({c['worst_app']['id']})")
    print(f"report: {outcome.paths['report']}")
    return 0

