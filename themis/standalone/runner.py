"""The standalone driver: arbiter service + application masters + live display + report."""

from __future__ import annotations

import collections
import logging
import math
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from themis.am.launchers.local.appmaster import AppMaster, GpuRegistry
from themis.am.launchers.local.spec import AppSpec
from themis.arbiter.cluster_backend import StaticCluster
from themis.arbiter.config import DEFAULT_MAX_APPS, ArbiterConfig
from themis.arbiter.leaselog import LeaseLog, LeaseLogError
from themis.arbiter.registration import HmacRegistrar
from themis.arbiter.service import ArbiterServer
from themis.arbiter.state import ArbiterCore
from themis.mechanism.fairness import DEFAULT_IDEAL_TIME, DEFAULT_STARVATION
from themis.mechanism.round import DEFAULT_FAIRNESS_KNOB
from themis.mechanism.solvers import DEFAULT_SOLVER
from themis.standalone.report import (
    app_json,
    gpu_moves,
    overlap_s,
    plot_report,
    resumes,
    rounds_json,
    write_report,
)

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_INCOMPLETE = 1  # timeout, or an app failed
EXIT_INTERRUPTED = 130
LEASE_LOG = "arbiter-leases.jsonl"  # in --out


class StartupError(RuntimeError):
    """The arbiter could not start (e.g. --port in use); nothing else was started."""


@dataclass
class Options:
    cluster: StaticCluster
    cluster_desc: str
    apps: list[AppSpec]
    out: Path
    lease_s: float = 40.0
    lease_spread_s: float | None = None  # None: half of lease_s (ArbiterConfig)
    fairness_knob: float = DEFAULT_FAIRNESS_KNOB
    ideal_time: str = str(DEFAULT_IDEAL_TIME)  # the form of T_id in rho (themis.mechanism.fairness)
    starvation: str = str(DEFAULT_STARVATION)  # the filter's order of apps holding no GPU
    bid_timeout_s: float = 2.0
    warning_s: float = 10.0
    grace_s: float = 3.0
    solver: str = DEFAULT_SOLVER
    seed: int = 0
    port: int = 0
    refresh_s: float | None = None  # None: 1 s for the table, 10 s for lines
    display: str = "auto"  # auto | table | lines | off
    timeout_s: float | None = None
    plot: bool = True
    shutdown_timeout_s: float = 30.0
    lease_log: Path | None = None  # None: out / LEASE_LOG


def _fmt_rho(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.2f}"


def _fmt_value(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def _params(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in sorted(config.items()))


def _bar(frac: float, width: int = 16) -> str:
    n = round(max(0.0, min(1.0, frac)) * width)
    return "[" + "#" * n + "." * (width - n) + f"] {frac * 100:3.0f}%"


class Display:
    """A compact table redrawn in place on a terminal, or periodic lines otherwise."""

    def __init__(self, stream: TextIO, mode: str, refresh_s: float | None) -> None:
        if mode == "auto":
            mode = "table" if stream.isatty() else "lines"
        self.stream = stream
        self.mode = mode
        self.refresh_s = refresh_s if refresh_s is not None else (
            1.0 if mode == "table" else 10.0)
        self.events: collections.deque[str] = collections.deque(maxlen=6)
        self._drawn = 0
        self._lock = threading.Lock()
        self._last_lines = -math.inf

    def event(self, msg: str, t: float) -> None:
        line = f"[{t:7.1f}s] {msg}"
        with self._lock:
            self.events.append(line)
            if self.mode == "lines":
                print(line, file=self.stream, flush=True)

    def rows(self, snaps: list[dict[str, Any]]) -> list[str]:
        width = max([len(s["name"]) for s in snaps] + [3])
        out = [f"{'app':<{width}}  {'state':<8} {'rho':>6} {'rep.':>6} {'GPUs':>4}  "
               f"{'jobs r/w/d':<10} {'progress':<24} held"]  # r(+s): running (+ checkpointing)
        for s in snaps:
            stopping = f"(+{s['stopping']})" if s.get("stopping") else ""
            jobs = f"{s.get('running', 0)}{stopping}/{s.get('waiting', 0)}/{s.get('done', 0)}"
            out.append(
                f"{s['name']:<{width}}  {s['state']:<8} {_fmt_rho(s.get('rho')):>6} "
                f"{_fmt_rho(s.get('rho_reported')):>6} {len(s.get('gpus', [])):>4}  "
                f"{jobs:<10} {_bar(s.get('progress', 0.0)):<24} "
                f"{' '.join(s.get('gpus', []))}")
        return out

    def update(self, header: str, snaps: list[dict[str, Any]], now: float) -> None:
        if self.mode == "off":
            return
        with self._lock:
            if now - self._last_lines < self.refresh_s:
                return
            self._last_lines = now
            if self.mode == "table":
                width = max(40, shutil.get_terminal_size((120, 24)).columns - 1)
                lines = [line[:width] for line in
                         (header, *self.rows(snaps), "recent:", *self.events)]
                buf = ""
                if self._drawn:
                    buf += f"\x1b[{self._drawn}F"
                buf += "".join(f"\x1b[2K{line}\n" for line in lines)
                self.stream.write(buf)
                self.stream.flush()
                self._drawn = len(lines)
            else:
                print(header, file=self.stream)
                for row in self.rows(snaps):
                    print("  " + row, file=self.stream)
                self.stream.flush()


class Standalone:
    def __init__(self, opts: Options, stream: TextIO = sys.stdout) -> None:
        self.opts = opts
        self.stream = stream
        self.display = Display(stream, opts.display, opts.refresh_s)
        self.t0 = time.time()
        self._stop = threading.Event()
        self.status = "running"
        self.server: ArbiterServer | None = None
        self.apps: list[AppMaster] = []

    def _emit(self, msg: str) -> None:
        self.display.event(msg, time.time() - self.t0)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if not self._stop.is_set():
            self._emit(f"signal {signum}: stopping (jobs checkpoint, then exit)")
        self._stop.set()

    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> int:
        o = self.opts
        o.out.mkdir(parents=True, exist_ok=True)
        old = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                old[sig] = signal.signal(sig, self._on_signal)
        try:
            return self._run()
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)

    def _header(self, now: float) -> str:
        core = self.server.core if self.server else None
        rounds = len(core.stats) if core else 0
        owned = len(core.backend.owners()) if core else 0
        total = len(self.opts.cluster.topology())
        return (f"themis standalone  t={now - self.t0:6.1f}s  {self.opts.cluster_desc}: "
                f"{owned}/{total} GPUs leased  lease {self.opts.lease_s:g}s  "
                f"f={self.opts.fairness_knob:g}  rounds {rounds}")

    def _run(self) -> int:
        o = self.opts
        cfg = ArbiterConfig(lease_s=o.lease_s, lease_spread_s=o.lease_spread_s,
                            bid_timeout_s=o.bid_timeout_s,
                            warning_s=min(o.warning_s, o.lease_s / 2),
                            fairness_knob=o.fairness_knob, heartbeat_s=2.0,
                            round_delay_s=0.05, solver=o.solver, seed=o.seed,
                            ideal_time=o.ideal_time, starvation=o.starvation,
                            # only this run's apps can register (their tokens are its own)
                            max_apps=max(DEFAULT_MAX_APPS, len(o.apps)))
        # registrations need the app's token (HMAC under a key drawn now), which this driver
        # hands only to its own application masters (docs/standalone.md)
        registrar = HmacRegistrar()
        # leases survive a crash of this process: a run given the same lease log honours
        # the unexpired ones (themis.arbiter.leaselog) while the old jobs may still run
        path = o.lease_log if o.lease_log is not None else o.out / LEASE_LOG
        try:
            core = ArbiterCore(o.cluster, cfg, lease_log=LeaseLog(path), registrar=registrar)
        except LeaseLogError as exc:
            raise StartupError(f"cannot start the arbiter: {exc}") from exc
        for g in core.restored:
            self._emit(f"honouring {g.app_id}'s lease on {' '.join(g.gpus)} from a previous "
                       f"run until {time.strftime('%H:%M:%S', time.localtime(g.expiry))}")
        self.server = ArbiterServer(o.cluster, cfg, max_workers=len(o.apps) + 32, core=core)
        try:
            port = self.server.start(o.port)
        except (OSError, RuntimeError) as exc:
            self.server = None
            raise StartupError(f"cannot start the arbiter on 127.0.0.1:{o.port}: {exc}"
                               ) from exc
        self.t0 = time.time()
        self._emit(f"arbiter on 127.0.0.1:{port}, {o.cluster_desc}, "
                   f"{len(o.apps)} apps, out {o.out}")
        topo = o.cluster.topology()
        registry = GpuRegistry()
        self.apps = [AppMaster(spec, f"127.0.0.1:{port}", o.out, topo, t0=self.t0,
                               grace_s=o.grace_s, emit=self._emit, registry=registry,
                               kill_after_s=o.shutdown_timeout_s,
                               min_lease_left_s=min(5.0, o.lease_s / 4),
                               registration_token=registrar.token_for(spec.name))
                     for spec in o.apps]
        try:
            for am in self.apps:
                am.start()
            while not self._stop.is_set():
                now = time.time()
                self.display.update(self._header(now), [a.snapshot() for a in self.apps], now)
                if all(a.finished for a in self.apps):
                    failed = [a.name for a in self.apps if a.state == "failed"]
                    self.status = "failed" if failed else "completed"
                    break
                if o.timeout_s is not None and now - self.t0 > o.timeout_s:
                    self._emit(f"timeout after {o.timeout_s:g}s: stopping")
                    self.status = "timeout"
                    break
                self._stop.wait(min(self.display.refresh_s, 0.5))
            if self._stop.is_set() and self.status == "running":
                self.status = "interrupted"
        finally:
            if self.status == "running":
                self.status = "interrupted"
            self._shutdown()
        report = self.report()
        path = o.out / "report.json"
        write_report(path, report)
        if o.plot:
            try:
                plot_report(report, o.out / "report.png")
            except Exception as exc:  # a plot problem must not lose the report
                log.warning("plot failed: %s", exc)
        self._summary(report)
        return {"completed": EXIT_OK, "interrupted": EXIT_INTERRUPTED}.get(
            self.status, EXIT_INCOMPLETE)

    def _shutdown(self) -> None:
        for am in self.apps:
            am.begin_shutdown()
        for am in self.apps:
            am.finish_shutdown(self.opts.shutdown_timeout_s)
        if self.server is not None:
            self.server.stop(0.5)
        now = time.time()
        self.display.update(self._header(now), [a.snapshot() for a in self.apps], now + 1e9)

    def report(self) -> dict[str, Any]:
        o = self.opts
        core = self.server.core if self.server else None
        rounds = rounds_json(core.stats, core.outcomes, self.t0) if core else []
        apps = {am.name: app_json(am, self.t0) for am in self.apps}
        topo = o.cluster.topology()
        return {
            "version": 1,
            "status": self.status,
            "duration_s": round(time.time() - self.t0, 3),
            "config": {
                "cluster": o.cluster_desc, "lease_s": o.lease_s,
                "fairness_knob": o.fairness_knob, "ideal_time": o.ideal_time,
                "starvation": o.starvation, "bid_timeout_s": o.bid_timeout_s,
                "warning_s": o.warning_s, "grace_s": o.grace_s, "solver": o.solver,
                "seed": o.seed,
                "apps": [{"source": s.source, **s.to_dict()} for s in o.apps],
            },
            "cluster": {"gpus": list(topo),
                        "machines": {m: [g.id for g in gs] for m, gs in topo.machines.items()}},
            "apps": apps,
            "rounds": rounds,
            "moves": gpu_moves(rounds),
            "resumes": resumes(apps),
        }

    def _summary(self, report: dict[str, Any]) -> None:
        if self.opts.display == "off":
            return
        p = self.stream
        print(f"\nstatus: {report['status']} after {report['duration_s']:.1f}s; "
              f"{len(report['rounds'])} rounds, "
              f"{sum(1 for m in report['moves'] if m['at_lease_expiry'])} GPU moves at lease "
              f"expiry, {len(report['resumes'])} job resumes from checkpoints; 2+ apps held "
              f"GPUs for {overlap_s(report):.0f}s", file=p)
        for name, a in report["apps"].items():
            best, metric = a["best"], a["objective"]["metric"]
            print(f"  {name}: {a['state']}, JCT {a['jct_s'] if a['jct_s'] is not None else '-'}"
                  f" s, {a['gpu_seconds_leased']:.0f} GPU-s leased "
                  f"({a['gpu_seconds_jobs']:.0f} in job processes), steps "
                  f"{a['steps_done']}/{a['steps_planned']}"
                  + (f", best {best['job']} {metric} {best['loss']}" if best else ""), file=p)
            for t in a["top"]:  # the top trials, best first
                print(f"    {t['id']:<16} {metric} {_fmt_value(t['value']):<10} step "
                      f"{t['steps']:>6} {t['status']:<9} {_params(t['config'])}", file=p)
        print(f"report: {self.opts.out / 'report.json'}"
              + (f", plot: {self.opts.out / 'report.png'}" if self.opts.plot else ""), file=p)
        p.flush()
