"""``themis standalone``: the arbiter and several Hyperband apps on this machine."""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

from themis.am.launchers.local.spec import (
    DEFAULT_ETA,
    DEFAULT_MAX_GPUS_PER_JOB,
    DEFAULT_MAX_RESOURCE,
    DEFAULT_STAGGER_S,
    DEFAULT_STEP_TIME_MS,
    DEFAULT_STEPS_PER_UNIT,
)
from themis.mechanism.fairness import (
    DEFAULT_IDEAL_TIME,
    DEFAULT_STARVATION,
    IDEAL_TIME_NAMES,
    STARVATION_NAMES,
)
from themis.mechanism.round import DEFAULT_FAIRNESS_KNOB
from themis.mechanism.solvers import DEFAULT_SOLVER, SOLVER_NAMES

EXIT_USAGE = 2

DESCRIPTION = """\
Run Themis on this machine without YARN: start the arbiter (gRPC on 127.0.0.1) over a
static cluster of GPUs and N hyper-parameter tuning apps. Each app is an application
master (Hyperband scheduler + TensorFlow event-log profiler + Themis agent) whose jobs are
real TensorFlow processes (python -m themis.jobs.train) bound to the app's leased GPUs:
a job runs only while its app holds a lease on its GPUs (their ids are exported as
THEMIS_GPU_IDS and CUDA_VISIBLE_DEVICES), is stopped with SIGTERM - it checkpoints - when
the lease is not renewed, and resumes from its checkpoint when its app gets GPUs again.
There is no real GPU: a GPU's speed is emulated by a per-step sleep (job step_time_ms).

The default run (only --out given) shows the mechanism in about 3 minutes on 2 cores:
3 built-in apps, each able to use 2 GPUs, arrive 15 s apart on 2 machines x 2 GPUs with
40 s leases, so one app always waits; at each lease expiry it bids and wins the expired
GPUs, the others keep theirs (renewal), and the apps take turns until they finish.

Live rho and allocations are printed per app; at the end OUT/report.json (rho over time,
GPU-seconds, completion, rounds, GPU moves, job segments) and OUT/report.png are written.
Ctrl-C stops cleanly: every job checkpoints and exits, nothing is left running.

Exit status: 0 all apps completed; 1 timeout or an app failed; 2 bad options or spec
files; 130 interrupted (Ctrl-C / SIGTERM)."""

EPILOG = """\
examples:
  themis standalone --out /tmp/themis-run
  themis standalone --steps-per-unit 100 --lease-s 30 --stagger-s 10 --out run
  themis standalone --machines 2 --gpus-per-machine 4 --apps 4 --lease-s 60 --out run
  themis standalone --cluster cluster.yaml --app a.yaml --app b.yaml --out run

cluster spec (YAML/JSON): racks: [{name: r0, machines: [{name: m0, gpus: 4,
gpus_per_slot: 2}, ...]}, ...]; app spec: see docs/standalone.md."""


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def _nonneg_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def _knob(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be in 0..65535, got {text}")
    return value


def configure(p: argparse.ArgumentParser) -> None:
    c = p.add_argument_group("cluster (a spec file, or a uniform cluster; default 2 x 2 GPUs)")
    c.add_argument("--cluster", type=Path, metavar="SPEC",
                   help="cluster spec file (.json or YAML) declaring racks, machines and GPUs")
    c.add_argument("--machines", type=_positive_int, metavar="M",
                   help="uniform cluster: number of machines (default 2)")
    c.add_argument("--gpus-per-machine", type=_positive_int, metavar="G",
                   help="uniform cluster: GPUs per machine (default 2)")
    c.add_argument("--racks", type=_positive_int, metavar="R",
                   help="uniform cluster: racks, machines spread round-robin (default 1)")
    a = p.add_argument_group("apps (built-in apps, or spec files)")
    a.add_argument("--apps", type=_positive_int, metavar="N",
                   help="run N built-in Hyperband apps app-0..app-N-1 (default 3): app-i "
                        "samples learning rate and width with seed i, runs one bracket of "
                        "R=--max-resource, eta=--eta (R=2, eta=2: two configurations, the "
                        "better one trained to twice the steps on --max-gpus-per-job GPUs) "
                        "and is submitted i x --stagger-s seconds after start-up")
    a.add_argument("--app", type=Path, action="append", metavar="SPEC.yaml",
                   help="an app spec file (YAML or .json); repeat for several apps; "
                        "not together with --apps (the built-in app options below do not "
                        "apply to spec files)")
    a.add_argument("--max-resource", type=_positive_float, default=DEFAULT_MAX_RESOURCE,
                   metavar="R",
                   help="built-in apps: Hyperband's maximum resource per configuration")
    a.add_argument("--eta", type=int, default=DEFAULT_ETA,
                   help="built-in apps: Hyperband halving rate")
    a.add_argument("--steps-per-unit", type=_positive_int, default=DEFAULT_STEPS_PER_UNIT,
                   metavar="STEPS",
                   help="built-in apps: training steps per Hyperband resource unit")
    a.add_argument("--step-time-ms", type=_nonneg_float, default=DEFAULT_STEP_TIME_MS,
                   metavar="MS",
                   help="built-in apps: emulated time of one training step on one GPU")
    a.add_argument("--max-gpus-per-job", type=_positive_int, default=DEFAULT_MAX_GPUS_PER_JOB,
                   metavar="K",
                   help="built-in apps: a job in rung i uses up to min(K, eta^i) GPUs (rung "
                        "0: one GPU per job; at most 64)")
    a.add_argument("--stagger-s", type=_nonneg_float, default=DEFAULT_STAGGER_S,
                   metavar="SECONDS",
                   help="built-in apps: app-i is submitted i x this many seconds after "
                        "start-up (0: all at once)")
    m = p.add_argument_group("mechanism")
    m.add_argument("--lease-s", type=_positive_float, default=40.0, metavar="SECONDS",
                   help="GPU lease length (the paper uses 600 s on real clusters)")
    m.add_argument("--lease-spread-s", type=_nonneg_float, default=None, metavar="SECONDS",
                   help="the leases granted in one round last --lease-s +- this / 2, spread "
                        "over the round's apps so that they do not all end together; at most "
                        "--lease-s (default: half of --lease-s)")
    m.add_argument("--fairness-knob", type=_knob, default=DEFAULT_FAIRNESS_KNOB, metavar="F",
                   help="f in [0, 1): the (1-f) fraction of apps with the worst rho bid")
    m.add_argument("--ideal-time", choices=IDEAL_TIME_NAMES, default=str(DEFAULT_IDEAL_TIME),
                   help="the ideal finish time T_id in rho: 'exact' = the app's plan on an "
                        "independent 1/N_avg share of the cluster (section 3.2), 'paper' = "
                        "Eq. 2's T_cluster x N_avg (docs/mechanism.md) (default: %(default)s)")
    m.add_argument("--starvation", choices=STARVATION_NAMES, default=str(DEFAULT_STARVATION),
                   help="how the filter orders apps holding no GPU: 'inf' = they tie at "
                        "rho = +inf (the paper), 'served-now' = the worst off first, by the "
                        "rho each would have if served now, at most as many as free GPUs; "
                        "'ranked' = like served-now, but an app that held GPUs before ranks "
                        "by that rho among all apps (docs/mechanism.md, \"Starvation\") "
                        "(default: %(default)s)")
    m.add_argument("--bid-timeout-s", type=_positive_float, default=2.0, metavar="SECONDS",
                   help="bid deadline after an offer; late agents count as non-bidders")
    m.add_argument("--warning-s", type=_nonneg_float, default=10.0, metavar="SECONDS",
                   help="lease warning this long before expiry (at most half the lease)")
    m.add_argument("--grace-s", type=_nonneg_float, default=3.0, metavar="SECONDS",
                   help="a job on an expired lease keeps running this long waiting for the "
                        "expiry round to renew it; stopped at once if the round does not")
    m.add_argument("--solver", default=DEFAULT_SOLVER, metavar="NAME",
                   help=f"auction solver ({', '.join(SOLVER_NAMES)}; default %(default)s: the "
                        "fast exact chain, Gurobi when licensed; docs/mechanism.md)")
    m.add_argument("--seed", type=int, default=0, help="seed of the arbiter's leftover lottery")
    m.add_argument("--port", type=_port, default=0,
                   help="arbiter port on 127.0.0.1 (0: any free port)")
    m.add_argument("--lease-log", type=Path, default=None, metavar="FILE",
                   help="the arbiter's persisted lease log (default: OUT/arbiter-leases.jsonl); "
                        "runs given the same file honour the unexpired leases of a run that "
                        "was killed, whose jobs may still be running (docs/standalone.md, "
                        "\"Crashes\")")
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="output directory: report.json, report.png, per app/job the event "
                        "logs, checkpoints and process logs (apps/<app>/jobs/<job>/), and by "
                        "default the arbiter's lease log arbiter-leases.jsonl")
    o.add_argument("--display", choices=("auto", "table", "lines", "off"), default="auto",
                   help="live view: a table redrawn in place (terminal), periodic lines "
                        "(auto when not a terminal), or nothing")
    o.add_argument("--refresh-s", type=_positive_float, default=None, metavar="SECONDS",
                   help="live view refresh period: the table is redrawn, or in lines mode "
                        "printed, this often (default: 1 for the table, 10 for lines)")
    o.add_argument("--timeout-s", type=_positive_float, default=None, metavar="SECONDS",
                   help="stop cleanly after this long even if apps are not done (exit 1) "
                        "(default: no limit)")
    o.add_argument("--shutdown-timeout-s", type=_positive_float, default=30.0,
                   metavar="SECONDS",
                   help="on stop, how long jobs get to checkpoint before SIGKILL")
    o.add_argument("--no-plot", action="store_true",
                   help="do not write report.png (default: it is written)")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks; appends "(default: X)" to options that have
    a default other than None/False."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        d = action.default
        if not (d is None or d is False or d == argparse.SUPPRESS) and action.option_strings \
                and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "standalone", help="run the arbiter and Hyperband apps with real TF jobs on this "
        "machine (no YARN)", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=_Formatter)
    configure(p)
    p.set_defaults(func=run, _parser=p)


class UsageError(ValueError):
    pass


#: the modules of the 'train' extra that standalone mode needs: the jobs (TensorFlow) and
#: the profiler reading their event logs (TensorBoard)
TRAIN_MODULES = ("tensorflow", "tensorboard")


def missing_train() -> list[str]:
    """The modules of :data:`TRAIN_MODULES` that are not installed (looked up, not
    imported: importing TensorFlow takes seconds)."""
    absent = []
    for name in TRAIN_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken or half-removed package
            found = False
        if not found:
            absent.append(name)
    return absent


def build_options(args: argparse.Namespace) -> Any:
    """Validate the options and spec files; raises UsageError/SpecError with a message."""
    from themis.am.hyperband import HyperbandError
    from themis.am.launchers.local.spec import SpecError, default_app, load_app_spec
    from themis.arbiter.cluster_backend import (
        ClusterSpecError,
        load_cluster_spec,
        uniform_cluster,
    )
    from themis.mechanism.solvers import make_solver
    from themis.mechanism.solvers.base import SolverError
    from themis.mechanism.topology import TopologyError

    uniform = [n for n in ("machines", "gpus_per_machine", "racks")
               if getattr(args, n) is not None]
    try:
        if args.cluster is not None:
            if uniform:
                raise UsageError(f"--cluster and --{uniform[0].replace('_', '-')} are mutually "
                                 "exclusive (the spec file declares the machines)")
            cluster = load_cluster_spec(args.cluster)
            desc = f"{args.cluster.name} ({len(cluster.topology().machines)} machines)"
        else:
            machines = args.machines or 2
            per = args.gpus_per_machine or 2
            racks = args.racks or 1
            if racks > machines:
                raise UsageError(f"--racks {racks} is more than --machines {machines}")
            cluster = uniform_cluster(machines, per, racks)
            desc = f"{machines} machine{'s' if machines > 1 else ''} x {per} GPU" \
                f"{'s' if per > 1 else ''}"
    except (ClusterSpecError, TopologyError) as exc:
        raise UsageError(str(exc)) from exc
    if args.app and args.apps is not None:
        raise UsageError("--apps and --app are mutually exclusive")
    if args.lease_spread_s is not None and args.lease_spread_s > args.lease_s:
        raise UsageError(f"--lease-spread-s {args.lease_spread_s:g} is more than --lease-s "
                         f"{args.lease_s:g}")
    if args.eta < 2:
        raise UsageError(f"--eta must be an integer >= 2, got {args.eta}")
    if args.max_resource < 1:
        raise UsageError(f"--max-resource must be a number >= 1, got {args.max_resource:g}")
    if not 1 <= args.max_gpus_per_job <= 64:
        raise UsageError(f"--max-gpus-per-job must be an integer in [1, 64], got "
                         f"{args.max_gpus_per_job}")
    try:
        if args.app:
            apps = [load_app_spec(path) for path in args.app]
        else:
            apps = [default_app(i, max_resource=args.max_resource, eta=args.eta,
                                steps_per_unit=args.steps_per_unit,
                                step_time_ms=args.step_time_ms,
                                max_gpus_per_job=args.max_gpus_per_job,
                                stagger_s=args.stagger_s)
                    for i in range(args.apps or 3)]
    except (SpecError, HyperbandError) as exc:
        raise UsageError(str(exc)) from exc
    names = [a.name for a in apps]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UsageError(f"app name {dup[0]!r} is used by more than one app (set 'name:' "
                         "in the spec files)")
    try:
        make_solver(args.solver)
    except (SolverError, ValueError, ImportError) as exc:
        raise UsageError(f"--solver: {exc}") from exc
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {str(args.out)!r} exists and is not a directory")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {str(args.out)!r}: cannot create: {exc.strerror}") from exc
    if (args.out / "apps").is_dir() and any((args.out / "apps").iterdir()):
        raise UsageError(f"--out {str(args.out)!r} already holds a run (apps/ with job "
                         "checkpoints that new jobs would resume from): use a new directory")
    absent = missing_train()
    if absent:
        verb = "is" if len(absent) == 1 else "are"
        raise UsageError(f"standalone mode runs real TensorFlow jobs and reads their event "
                         f"logs: {' and '.join(absent)} {verb} not installed; install the "
                         "'train' extra: pip install 'themis-yarn[train]'")
    from themis.standalone.runner import Options  # imports TensorBoard's event reader

    return Options(
        cluster=cluster, cluster_desc=desc, apps=apps, out=args.out, lease_s=args.lease_s,
        lease_spread_s=args.lease_spread_s,
        fairness_knob=args.fairness_knob, ideal_time=args.ideal_time,
        starvation=args.starvation, bid_timeout_s=args.bid_timeout_s,
        warning_s=args.warning_s, grace_s=args.grace_s, solver=args.solver, seed=args.seed,
        port=args.port, refresh_s=args.refresh_s, display=args.display,
        timeout_s=args.timeout_s, plot=not args.no_plot,
        shutdown_timeout_s=args.shutdown_timeout_s, lease_log=args.lease_log)


def run(args: argparse.Namespace) -> int:
    try:
        opts = build_options(args)
    except UsageError as exc:
        print(f"themis standalone: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from themis.standalone.runner import Standalone, StartupError

    try:
        return Standalone(opts).run()
    except StartupError as exc:
        print(f"themis standalone: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
