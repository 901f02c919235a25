"""``themis submit | job run | status | kill``: the Submarine-style client (docs/am.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from typing import Any

from themis.am.spec import AppSpec, parse_spec
from themis.am.speccheck import SpecError
from themis.am.specfile import load_spec


def _cluster(args: argparse.Namespace) -> Any:
    from themis.client.cluster import Cluster

    return Cluster.from_env(args.rm, args.webhdfs, args.user)


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster")
    g.add_argument("--rm", default=None,
                   help="RM web address (default $THEMIS_RM_URL or http://127.0.0.1:8088)")
    g.add_argument("--webhdfs", default=None,
                   help="NameNode HTTP address (default $THEMIS_WEBHDFS_URL or "
                        "http://127.0.0.1:9870)")
    g.add_argument("--user", default=None,
                   help="YARN/HDFS user on a cluster without Kerberos (default "
                        "$HADOOP_USER_NAME, else your login name); on a Kerberos cluster "
                        "the ticket of `kinit` says who you are")


def _submit_spec(args: argparse.Namespace, spec: AppSpec) -> int:
    from themis.client.cluster import ClientError, find_am_jar

    if args.dry_run:
        print(json.dumps(spec.to_dict(), indent=2))
        return 0
    try:
        jar = find_am_jar()
        app_id = _cluster(args).submit(spec, jar, python=args.am_python)
    except ClientError as e:
        print(f"themis: submit failed: {e}", file=sys.stderr)
        return 1
    print(app_id, flush=True)
    after = getattr(args, "after_submit", None)
    if after is not None:
        after(args, app_id)
    if getattr(args, "wait", False):
        return _watch(args, app_id, until_done=True)
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.spec)
    except SpecError as e:
        print(f"themis: {args.spec}: {e}", file=sys.stderr)
        return 2
    return _submit_spec(args, spec)


def _resources(text: str, flag: str = "--worker_resources") -> dict[str, int]:
    """Submarine's ``memory=2G,vcores=1,gpu=1`` (memory in M or G)."""
    out: dict[str, int] = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        k, _, v = part.partition("=")
        k, v = k.strip().lower(), v.strip()
        if k in ("memory", "memory-mb", "mem"):
            mult = 1024 if v.upper().endswith("G") else 1
            out["memory_mb"] = _count(flag, k, v.rstrip("GgMm"), mult)
        elif k in ("vcores", "vcore", "cpu"):
            out["vcores"] = _count(flag, k, v, whole=True)
        elif k in ("gpu", "gpus", "yarn.io/gpu"):
            out["gpus"] = _count(flag, k, v, whole=True)
        else:
            raise SpecError([(flag, f"unknown resource {k[:40]!r} (memory, vcores, gpu)")])
    return out


def _count(flag: str, key: str, text: str, mult: int = 1, whole: bool = False) -> int:
    """A resource amount (the spec's bounds are checked by parse_spec)."""
    try:
        x = float(text) * mult if len(text) <= 20 else math.nan
    except ValueError:
        x = math.nan
    if not 0 <= x <= 1e12 or (whole and not x.is_integer()):
        raise SpecError([(flag, f"{key}={text[:40]!r} is not "
                                f"{'an integer' if whole else 'a number'} in [0, 1e12]")])
    return int(x)


#: Submarine ``job run`` flags Themis refuses, with the reason (docs/am.md, "themis job run")
REFUSED_FLAGS = {
    "saved_model_path": "not supported: the job exports its own model",
    "localization": "not supported: put files in HDFS and read them from the job, or in "
                    "the NodeManager image",
    "conf": "not supported: use --env, or the spec file of `themis submit`",
    "quicklink": "not supported: the app's tracking URL is the AM's status page",
    "keytab": "Kerberos is not supported by the Themis client (docs/yarn.md, 'Security')",
    "principal": "Kerberos is not supported by the Themis client (docs/yarn.md, 'Security')",
    "distribute_keytab": "Kerberos is not supported by the Themis client",
}
#: Submarine substitutions in --worker_launch_cmd
SUBST = ("%checkpoint_path%", "%input_path%")


def _literal(text: str) -> str:
    """``text`` inside a ``job.command`` template: braces are not placeholders."""
    return text.replace("{", "{{").replace("}", "}}")


def job_run_spec(args: argparse.Namespace) -> dict[str, Any]:
    """The ``single-job`` spec of ``themis job run`` (raises SpecError naming every bad
    flag): Submarine's flags mapped onto docs/am.md's spec format."""
    problems: list[tuple[str, str]] = []
    for flag, why in REFUSED_FLAGS.items():
        if getattr(args, flag, None) not in (None, False):
            problems.append((f"--{flag}", why))
    if args.framework.lower() != "tensorflow":
        problems.append(("--framework", f"only tensorflow jobs are supported, got "
                                        f"{args.framework[:40]!r}"))
    if not 1 <= args.num_workers <= 64:
        problems.append(("--num_workers", f"must be in [1, 64], got {args.num_workers}"))
    if not 0 <= args.num_ps <= 64:
        problems.append(("--num_ps", f"must be in [0, 64], got {args.num_ps}"))
    for flag in ("ps_resources", "ps_launch_cmd"):
        if getattr(args, flag) is not None and args.num_ps < 1:
            problems.append((f"--{flag}", "needs parameter servers (--num_ps N, N >= 1)"))
    cmd = _substitute(args, args.worker_launch_cmd, "--worker_launch_cmd", problems)
    ps_cmd = (_substitute(args, args.ps_launch_cmd, "--ps_launch_cmd", problems)
              if args.ps_launch_cmd is not None else "")
    res: dict[str, int] = {}
    ps_res: dict[str, int] = {}
    env: dict[str, str] = {}
    try:
        res = _resources(args.worker_resources)
    except SpecError as e:
        problems += e.problems
    try:
        ps_res = _resources(args.ps_resources or "", "--ps_resources")
    except SpecError as e:
        problems += e.problems
    tb_res: dict[str, int] = {}
    try:
        tb_res = _resources(args.tensorboard_resources or "", "--tensorboard_resources")
    except SpecError as e:
        problems += e.problems
    if tb_res.pop("gpus", 0):
        problems.append(("--tensorboard_resources", "TensorBoard gets no GPU (gpu=0)"))
    for flag in ("tensorboard_resources", "tensorboard_docker_image"):
        if getattr(args, flag) is not None and not args.tensorboard:
            problems.append((f"--{flag}", "needs --tensorboard"))
    if ps_res.pop("gpus", 0):
        problems.append(("--ps_resources", "parameter servers get no GPU (gpu=0); GPUs go "
                                           "to the workers (--worker_resources gpu=N)"))
    for item in args.env:
        name, eq, value = item.partition("=")
        if not eq or not name:
            problems.append(("--env", f"{item[:40]!r}: each --env must be NAME=VALUE"))
        else:
            env[name] = value
    if args.ps_docker_image is not None and args.num_ps < 1:
        problems.append(("--ps_docker_image", "needs parameter servers (--num_ps N, N >= 1)"))
    if problems:
        raise SpecError(problems)
    worker_image = args.worker_docker_image or args.docker_image
    ps_image = args.ps_docker_image or args.docker_image
    spec: dict[str, Any] = {"name": args.name, "queue": args.queue, "kind": "single-job",
                            **({"node_label": args.node_label} if args.node_label else {}),
                            "max_steps": args.max_steps, "job": {"command": cmd, "env": env},
                            "resources": res}
    if worker_image is not None:
        spec["job"]["docker_image"] = worker_image
    if args.tensorboard:
        spec["tensorboard"] = {**tb_res, **({"docker_image": args.tensorboard_docker_image}
                                            if args.tensorboard_docker_image else {})}
    if args.num_workers > 1 or args.num_ps:
        spec["tasks"] = {"workers": args.num_workers}
        if args.num_ps:
            spec["tasks"]["ps"] = {"count": args.num_ps, **ps_res,
                                   **({"command": ps_cmd} if ps_cmd else {}),
                                   **({"docker_image": ps_image} if ps_image else {})}
    return spec


def _substitute(args: argparse.Namespace, cmd: str, flag: str,
                problems: list[tuple[str, str]]) -> str:
    """Submarine's ``%checkpoint_path%`` / ``%input_path%`` in a launch command."""
    # %checkpoint_path%: the user's own directory, else the job's checkpoint directory
    # that Themis keeps across moves (docs/jobs.md)
    ckpt = _literal(args.checkpoint_path) if args.checkpoint_path else "{checkpoint_dir}"
    cmd = cmd.replace("%checkpoint_path%", ckpt)
    if "%input_path%" in cmd and not args.input_path:
        problems.append(("--input_path", f"is required: {flag} uses %input_path%"))
    return cmd.replace("%input_path%", _literal(args.input_path or ""))


def cmd_job_run(args: argparse.Namespace) -> int:
    try:
        spec = parse_spec(job_run_spec(args))
    except SpecError as e:
        print(f"themis: {e}", file=sys.stderr)
        return 2
    if args.verbose:
        print(json.dumps(spec.to_dict(), indent=2), file=sys.stderr)
    args.wait = args.wait_job_finish
    if args.tensorboard and not args.dry_run:
        args.after_submit = _tensorboard_hint
    return _submit_spec(args, spec)


def _tensorboard_hint(args: argparse.Namespace, app_id: str) -> None:
    """``--tensorboard``: where the app's TensorBoard appears, and the local alternative
    (the runners copy the event files to the app's HDFS directory while the jobs run;
    docs/am.md, "TensorBoard container")."""
    print(f"themis: TensorBoard: the app's TensorBoard container serves every job's event "
          f"files; its URL is in `themis status {app_id}`. Locally: themis logs {app_id} "
          f"--tensorboard --dest ./themis-tensorboard/{app_id} && tensorboard --logdir "
          f"./themis-tensorboard/{app_id}", file=sys.stderr)


def _fmt_rho(x: Any) -> str:
    return "inf" if x is None else f"{float(x):.3f}" if math.isfinite(float(x)) else "inf"


def _render(app: dict[str, Any], st: dict[str, Any] | None, detail: bool,
            me: str = "") -> list[str]:
    lines = []
    name = app.get("name", "")
    state = f"{app.get('state')}/{app.get('finalStatus')}"
    # why an app failed or was killed: the AM's message, else YARN's diagnostics
    why = str((st or {}).get("message") or app.get("diagnostics") or "").strip()
    failed = app.get("finalStatus") in ("FAILED", "KILLED") and why
    if st is None:
        owner = str(app.get("user", ""))
        none = (f"(no AM status: it is {owner}'s to read - YARN's VIEW_APP ACL, HDFS "
                "permissions)" if me and owner and owner != me else "(no AM status yet)")
        lines.append(f"{app['id']}  {name:<14} {state:<20} {none}")
        return lines + ([f"    {why[:2000]}"] if failed else [])
    gpus = st.get("gpus", {})
    jobs = st.get("jobs", [])
    running = sum(1 for j in jobs if (j.get("run") or {}).get("state") == "running")
    done = sum(1 for j in jobs if j["status"] in ("finished", "stopped", "rung-done"))
    hb = st.get("hyperband", {})
    lines.append(
        f"{app['id']}  {name:<14} {state:<20} rho={_fmt_rho(st.get('rho')):<7} "
        f"gpus={gpus.get('count', 0)} {json.dumps(gpus.get('by_node', {}))} "
        f"jobs running={running} done={done}/{len(jobs)} "
        f"progress={100 * hb.get('progress', 0):.0f}% gpu-time={st.get('gpu_seconds', 0):.0f}s")
    if failed:
        lines.append(f"    {why[:2000]}")
    tb = st.get("tensorboard") or {}
    if tb:
        lines.append(f"    TensorBoard: {tb.get('url') or tb.get('state')}"
                     + (f" ({tb['message']})" if tb.get("message") else ""))
    metric = (st.get("objective") or {}).get("metric", "loss")
    best = _best_line(st, metric)
    if best:
        lines.append(best)
    missing = [j for j in jobs if j.get("missing_objective")]
    if missing:  # no silent search: what those trials wrote instead
        tags = sorted({t for j in missing for t in j.get("tags", [])})
        lines.append(f"    {len(missing)} trial(s) without any {metric} value (ranked last); "
                     f"their event files hold: {', '.join(tags[:12]) or 'no scalar'}")
    if detail:
        for j in jobs:
            run = j.get("run") or {}
            loss = j.get("loss")
            lines.append(
                f"    {j['id']:<28} {j['status']:<9} step {j['steps']:>5}/{j['target_steps']:<5} "
                f"{metric}={'-' if loss is None else f'{loss:.4f}'}"
                f"{f' ({src})' if (src := j.get('objective_source')) and src != metric else ''} "
                f"run={run.get('state', '-')}@{run.get('node', '-')} "
                f"restored={j.get('restored_steps', [])}")
        for r in st.get("reallocations", [])[-5:]:
            lines.append(f"    moved {r['job_id']} {r['from_node']} -> {r['to_node']} in "
                         f"{r['latency_s']:.2f}s (restored step {r['restored_step']})")
    return lines


def _best_line(st: dict[str, Any], metric: str) -> str:
    """The best trial and its hyper-parameters: the best finished one, else the leading
    trial so far (``top``, best first); "" before any trial has a value."""
    best, top = st.get("best"), st.get("top") or []
    if best:
        trial, what = {"id": best["id"], "value": best.get("loss"),
                       "config": best.get("config", {})}, "best"
    elif top:
        trial, what = top[0], "leading"
    else:
        return ""
    value = trial.get("value")
    shown = "-" if value is None else f"{value:.4g}"
    params = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in sorted((trial.get("config") or {}).items()) if k != "_")
    reached = " (target reached)" if st.get("target_reached") else ""
    return f"    {what} trial: {trial['id']} {metric}={shown}{reached} {params}".rstrip()


ACTIVE_STATES = "NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING"


def _hms(ms: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000.0))


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _add_gpu_apps(c: Any, out: list[dict[str, Any]]) -> dict[str, Any]:
    """Adds ``gpus`` (the plugin's entry: agent, asks, running GPUs, wait reason) and
    ``leases`` to every entry of ``out``, and an entry for every other app that holds or asks
    GPUs (any application type); returns the plugin's state."""
    state: dict[str, Any] = c.themis_state()
    by_id = {str(a["app_id"]): a for a in state.get("apps", [])}
    leases: dict[str, list[dict[str, Any]]] = {}
    for lease in state.get("leases", []):
        leases.setdefault(str(lease["app_id"]), []).append(lease)
    known = {str(e["app"]["id"]) for e in out}
    others = sorted((set(by_id) | set(leases)) - known)
    if others:
        rest = {str(a["id"]): a for a in c.all_apps(ACTIVE_STATES)}
        out.extend({"app": rest.get(i, {"id": i}), "status": None} for i in others)
    for e in out:
        app_id = str(e["app"]["id"])
        e["gpus"] = by_id.get(app_id)
        e["leases"] = leases.get(app_id, [])
    return state


def _partition_summary(state: dict[str, Any]) -> list[str]:
    """One line per partition (node label) when the cluster has labeled nodes: its GPUs,
    grantable and leased, and how many apps of it wait for GPUs ("" is the default)."""
    nodes = state.get("nodes", [])
    if not any(n.get("partition") for n in nodes):
        return []
    lines = []
    for p in sorted({str(n.get("partition", "")) for n in nodes}):
        mine = [n for n in nodes if str(n.get("partition", "")) == p]
        leased = sum(int(x["gpus"]) for x in state.get("leases", [])
                     if str(x.get("partition", "")) == p)
        waiting = sum(1 for a in state.get("apps", []) if str(a.get("partition", "")) == p
                      and int(a.get("asked_gpus", 0)) > 0)
        lines.append(f"partition {p or '<default>'}: "
                     f"{_gpus(sum(int(n['total_gpus']) for n in mine))} on {len(mine)} "
                     f"node{'s' if len(mine) != 1 else ''}, "
                     f"{sum(int(n['grantable_gpus']) for n in mine)} grantable, {leased} "
                     f"leased; {waiting} app{'s' if waiting != 1 else ''} asking")
    return lines


def _render_gpus(e: dict[str, Any], now_ms: float) -> list[str]:
    """The GPU lines of an app: header (apps without an AM status), leases, wait reason."""
    lines = []
    app, g = e["app"], e.get("gpus") or {}
    if e.get("status") is None:
        asks = " + ".join(f"{a['containers']}x{_gpus(a['gpus_per_container'])}"
                          for a in g.get("asks", [])) or "none"
        running = sum(int(v) for v in (g.get("running_gpus") or {}).values())
        lines.append(
            f"{app['id']}  {app.get('name', ''):<14} "
            f"{str(app.get('state')) + '/' + str(app.get('finalStatus')):<20} "
            f"{app.get('applicationType', '?')} agent={'yes' if g.get('agent') else 'no'} "
            f"asks={asks} running={_gpus(running)} {json.dumps(g.get('running_gpus', {}))}")
    for lease in e.get("leases", []):
        left = (float(lease["expiry_ms"]) - now_ms) / 1000.0
        part = f" (partition {lease['partition']})" if lease.get("partition") else ""
        lines.append(f"    lease {lease['lease_id']}: {_gpus(int(lease['gpus']))} on "
                     f"{lease['node_id']}{part} until {_hms(lease['expiry_ms'])} "
                     f"(in {max(0.0, left):.0f} s) {lease['state']}")
    if g.get("diagnostics"):
        lines.append(f"    {g['diagnostics']}")
    return lines


def _watch(args: argparse.Namespace, app_id: str | None, until_done: bool = False) -> int:
    from themis.client.cluster import ClientError

    c = _cluster(args)
    interval = getattr(args, "watch", None) or 2.0
    every = bool(getattr(args, "all", False)) and not app_id
    me = ""  # who the cluster sees (asked once, when an app's AM status is unreadable)
    while True:
        try:
            apps = [c.app(app_id)] if app_id else c.apps("" if every else ACTIVE_STATES)
        except ClientError as exc:
            print(f"themis: {exc}", file=sys.stderr)
            return 1
        out: list[dict[str, Any]] = []
        for a in apps:
            out.append({"app": a, "status": c.am_status(a["id"], a.get("user"))})
        if not me and any(e["status"] is None for e in out):
            with contextlib.suppress(ClientError):
                me = c.whoami()
        lines = [time.strftime("%H:%M:%S")]
        state: dict[str, Any] = {}
        if every:
            try:
                state = _add_gpu_apps(c, out)
            except ClientError as exc:
                print(f"themis: status --all: {exc}", file=sys.stderr)
                return 1
            lines += _partition_summary(state)
        for e in out:
            if e["status"] is not None or not every:
                lines += _render(e["app"], e["status"], detail=bool(app_id), me=me)
            if every:
                lines += _render_gpus(e, float(state.get("now_ms", time.time() * 1000)))
        if args.json:
            print(json.dumps(out if not app_id else out[0]))
        else:
            print("\n".join(lines), flush=True)
        ended = all(a["state"] in ("FINISHED", "FAILED", "KILLED") for a in apps)
        if not (getattr(args, "watch", None) or until_done) or (until_done and ended):
            if until_done:
                return 0 if all(a.get("finalStatus") == "SUCCEEDED" for a in apps) else 1
            return 0
        time.sleep(interval)


def cmd_status(args: argparse.Namespace) -> int:
    return _watch(args, args.app)


def cmd_kill(args: argparse.Namespace) -> int:
    from themis.client.cluster import ClientError

    try:
        state = _cluster(args).kill(args.app)
    except ClientError as e:
        print(f"themis: kill failed: {e}", file=sys.stderr)
        return 1
    print(f"{args.app}: {state or 'KILLED'}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("submit", help="submit a hyper-parameter group (YAML spec) to YARN",
                       description="Validate SPEC (refused before anything is submitted if "
                                   "invalid), upload it and the AM jar to HDFS, submit the app "
                                   "through the RM REST API; prints the application id.")
    p.add_argument("spec", help="app spec (YAML; see docs/am.md)")
    p.add_argument("--dry-run", action="store_true", help="validate and print the spec only")
    p.add_argument("--wait", action="store_true", help="follow the app until it ends")
    p.add_argument("--watch", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--all", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--am-python", default="",
                   help="python of the AM and job containers (default: the cluster's "
                        "yarn.resourcemanager.themis.python-executable, else python3)")
    _common(p)
    p.set_defaults(func=cmd_submit)

    j = sub.add_parser("job", help="Submarine-style single job (themis job run ...)")
    jsub = j.add_subparsers(dest="job_command", metavar="ACTION")
    r = jsub.add_parser("run", help="run one training job (Submarine 'job run' flags)")
    r.add_argument("--name", required=True, help="application name shown by YARN")
    r.add_argument("--worker_launch_cmd", required=True,
                   help="the job's command, run by bash in its container; needs no "
                        "placeholders (the job gets $THEMIS_MAX_STEPS, "
                        "$THEMIS_CHECKPOINT_DIR, $THEMIS_LOGDIR: docs/jobs.md); may use "
                        "{max_steps} {checkpoint_dir} {checkpoint_uri} {logdir} {job_id} "
                        "and Submarine's %%checkpoint_path%% / %%input_path%%")
    r.add_argument("--worker_resources", default="memory=1G,vcores=1,gpu=1",
                   help="resources of the worker container: memory (M or G), vcores, gpu "
                        "(default %(default)s)")
    r.add_argument("--num_workers", type=int, default=1,
                   help="workers of the job, each with --worker_resources; more than one: a "
                        "distributed TensorFlow job, gang-scheduled, every task gets "
                        "TF_CONFIG, worker 0 is the chief (default 1; docs/jobs.md)")
    r.add_argument("--num_ps", type=int, default=0,
                   help="parameter servers of the job, without GPU (default 0)")
    r.add_argument("--ps_resources", default=None,
                   help="resources of each parameter server container: memory (M or G), "
                        "vcores; no gpu (default memory=1G,vcores=1; needs --num_ps)")
    r.add_argument("--ps_launch_cmd", default=None,
                   help="the parameter servers' command, like --worker_launch_cmd (default: "
                        "--worker_launch_cmd; needs --num_ps)")
    r.add_argument("--checkpoint_path", default=None,
                   help="replaces %%checkpoint_path%% in the command (default: the job's "
                        "checkpoint directory that Themis keeps across moves, "
                        "{checkpoint_dir})")
    r.add_argument("--input_path", default=None,
                   help="replaces %%input_path%% in the command (default: none; required "
                        "when the command uses %%input_path%%)")
    r.add_argument("--framework", default="tensorflow",
                   help="the job's framework (default %(default)s; only tensorflow)")
    r.add_argument("--queue", default="default", help="YARN queue (default %(default)s)")
    r.add_argument("--node_label", default="",
                   help="YARN node label (partition) the job's containers run in, e.g. gpu; "
                        "refused at submit when the cluster lacks it or the queue may not "
                        "use it (default: the queue's default-node-label-expression)")
    r.add_argument("--env", action="append", default=[],
                   help="NAME=VALUE in the job's environment (repeatable; default none)")
    r.add_argument("--max_steps", type=int, default=1000,
                   help="training steps of the job ({max_steps}, $THEMIS_MAX_STEPS; "
                        "default %(default)s)")
    r.add_argument("--docker_image", default=None,
                   help="Docker image of every task (job.docker_image), run through YARN's "
                        "Docker runtime; the app fails with the NodeManagers and settings "
                        "missing unless every NodeManager with GPUs runs it (default: none, "
                        "the NodeManager's own environment; docs/am.md, 'Docker images')")
    r.add_argument("--worker_docker_image", default=None,
                   help="Docker image of the workers (default: --docker_image)")
    r.add_argument("--ps_docker_image", default=None,
                   help="Docker image of the parameter servers (tasks.ps.docker_image; "
                        "default: --docker_image; needs --num_ps)")
    r.add_argument("--tensorboard", action="store_true",
                   help="run a TensorBoard container for the app, serving every job's "
                        "event files (its URL: themis status APP; spec 'tensorboard'; "
                        "default: off)")
    r.add_argument("--tensorboard_resources", default=None,
                   help="resources of the TensorBoard container: memory (M or G), vcores "
                        "(default memory=1G,vcores=1; needs --tensorboard)")
    r.add_argument("--tensorboard_docker_image", default=None,
                   help="Docker image of the TensorBoard container, through YARN's Docker "
                        "runtime as --docker_image (default: none, the NodeManager's own "
                        "environment; needs --tensorboard)")
    r.add_argument("--insecure", action="store_true",
                   help="Submarine's 'cluster without Kerberos': the only mode of the Themis "
                        "client, so it changes nothing (default: off)")
    r.add_argument("--verbose", action="store_true",
                   help="print the generated spec on stderr (default: off)")
    r.add_argument("--wait_job_finish", action="store_true",
                   help="follow the app until it ends (default: return after submitting)")
    refused = r.add_argument_group(
        "refused Submarine flags", "Submarine flags Themis refuses (exit 2, with the "
        "reason; docs/am.md, 'themis job run'): "
        + ", ".join(f"--{f}" for f in REFUSED_FLAGS))
    for flag in REFUSED_FLAGS:
        if flag == "distribute_keytab":
            refused.add_argument(f"--{flag}", action="store_true", default=None,
                                 help=argparse.SUPPRESS)
        else:
            refused.add_argument(f"--{flag}", default=None, metavar="X",
                                 help=argparse.SUPPRESS)
    r.add_argument("--dry-run", action="store_true",
                   help="validate and print the generated spec only; submit nothing")
    r.add_argument("--am-python", default="",
                   help="python of the AM and job containers (default: the cluster's "
                        "yarn.resourcemanager.themis.python-executable, else python3)")
    r.add_argument("--watch", type=float, default=None, help=argparse.SUPPRESS)
    r.add_argument("--all", action="store_true", help=argparse.SUPPRESS)
    r.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    _common(r)
    r.set_defaults(func=cmd_job_run)
    j.set_defaults(func=lambda a: (j.print_help(), 2)[1])

    s = sub.add_parser(
        "status", help="rho, GPUs and job progress of Themis apps; --all: every GPU app",
        description="Without APP: one line per running Themis app (rho, GPUs, jobs). With "
                    "--all: finished Themis apps too, and every app of any type (MapReduce, "
                    "Spark, ...) that holds or asks GPUs, with its Themis leases (GPUs, node, "
                    "expiry) and why it waits, from the RM's REST API and the Themis "
                    "plugin's status in the RM's /jmx.")
    s.add_argument("app", nargs="?", default=None, help="one application id (details)")
    s.add_argument("--watch", type=float, nargs="?", const=2.0, default=None,
                   help="refresh every N seconds (default: no refresh; 2 if N is omitted)")
    s.add_argument("--all", action="store_true",
                   help="also finished Themis apps, and every app of any type that holds or "
                        "asks GPUs with its leases and wait reason (default: off)")
    s.add_argument("--json", action="store_true",
                   help="print JSON only (a list of {app, status} objects, with --all also "
                        "gpus and leases; default: text)")
    _common(s)
    s.set_defaults(func=cmd_status)

    k = sub.add_parser("kill", help="kill a Themis app")
    k.add_argument("app", help="application id to kill")
    _common(k)
    k.set_defaults(func=cmd_kill)
