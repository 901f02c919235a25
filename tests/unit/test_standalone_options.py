"""``themis standalone``: option and spec validation (exit status 2 with a message naming
the problem), app spec parsing, report helpers and the live view. No TensorFlow runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from themis.am.launchers.local.spec import (
    AppSpec,
    SpecError,
    default_app,
    load_app_spec,
)
from themis.cli import build_parser, main
from themis.standalone.cli import build_options
from themis.standalone.report import gpu_moves, held_at, held_steps, overlap_s
from themis.standalone.runner import Display

GOOD = {
    "name": "lr",
    "seed": 3,
    "hyperband": {"max_resource": 9, "eta": 3, "brackets": [2], "steps_per_unit": 10},
    "search_space": {
        "learning_rate": {"type": "double", "min": 1e-4, "max": 1e-1, "scale": "log"},
        "hidden_units": {"type": "int", "min": 8, "max": 32},
        "optimizer": {"type": "categorical", "values": ["adam", "sgd"]},
    },
    "job": {"step_time_ms": 20, "batch_size": 16, "dataset": "synthetic"},
}

#: GOOD in the one spec format (docs/am.md), as ``themis submit`` takes it too
GOOD_NEW = {
    "name": "lr", "search_space": GOOD["search_space"],
    "hyperband": {"max_resource": 9, "eta": 3, "brackets": [2], "steps_per_unit": 10,
                  "seed": 3},
    "job": {"args": GOOD["job"]},
}


def spec(**changes: object) -> dict[str, object]:
    d = json.loads(json.dumps(GOOD))
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            if value is None:
                d[section].pop(field)
            else:
                d[section][field] = value
        elif value is None:
            d.pop(section)
        else:
            d[section] = value
    return d


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(["standalone", *argv])
    except SystemExit as exc:  # argparse errors
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


# --------------------------------------------------------------------------- app specs
def test_good_spec_parses_and_counts_planned_steps(tmp_path: Path) -> None:
    path = tmp_path / "lr.yaml"
    path.write_text(json.dumps(GOOD))  # JSON is YAML
    s = load_app_spec(path)
    assert s.name == "lr" and s.seed == 3 and s.hyperband.brackets == (2,)
    # bracket s=2 of R=9, eta=3: 9 x 1 unit, 3 x 3 units, 1 x 9 units (10 steps per unit)
    assert s.planned_steps() == 9 * 10 + 3 * 20 + 1 * 60
    assert s.step_time_ms == 20
    assert len(s.space().params) == 3


def test_default_app_is_one_bracket_of_two_configurations_arriving_staggered() -> None:
    s = default_app(1, steps_per_unit=20)
    assert s.name == "app-1" and s.seed == 1 and s.hyperband.brackets == (1,)
    # R=2, eta=2, s=1: two configurations of 20 steps, the better one continued to 40 steps
    # on min(2, eta^1) = 2 GPUs; app-i arrives i x 15 s after start-up
    assert s.planned_steps() == 2 * 20 + 20
    assert s.resources.gpus == 2 and s.submit_at_s == 15.0
    assert s.step_time_ms == 200.0
    s3 = default_app(2, max_resource=3, eta=3, steps_per_unit=20, max_gpus_per_job=1,
                     stagger_s=0)
    assert s3.planned_steps() == 3 * 20 + 40 and s3.submit_at_s == 0


def test_name_defaults_to_file_stem_and_json_suffix(tmp_path: Path) -> None:
    d = spec(name=None)
    path = tmp_path / "my-app.json"
    path.write_text(json.dumps(d))
    assert load_app_spec(path).name == "my-app"


@pytest.mark.parametrize(("changes", "message"), [
    ({"colour": "red"}, "colour: unknown field"),
    ({"name": "has space"}, "name: must match"),
    ({"seed": "x"}, "seed: must be an integer, got 'x'"),
    ({"submit_at_s": -1}, "submit_at_s: must be a number in [0, 1e18], got -1"),
    ({"search_space": None}, "search_space: a hyperband app needs a mapping"),
    ({"search_space": {}}, "search_space: a hyperband app needs a mapping"),
    ({"search_space": {"learning_rate": 3}}, "search_space.learning_rate: must be a mapping"),
    ({"search_space": {"colour": {"type": "int", "min": 1, "max": 2}}},
     "search_space.colour: not a hyper-parameter"),
    ({"search_space": {"learning_rate": {"type": "double", "min": -1, "max": 1}}},
     "search_space.learning_rate: value -1 must be a number > 0"),
    ({"search_space": {"optimizer": {"type": "categorical", "values": ["adam", "lbfgs"]}}},
     "value 'lbfgs' must be one of adam"),
    ({"search_space": {"batch_size": {"type": "double", "min": 1, "max": 8}}},
     "search_space.batch_size: must be of type int"),
    ({"search_space": {"learning_rate": {"type": "float", "min": 1, "max": 8}}},
     "search_space.learning_rate.type: must be double, int or categorical"),
    ({"search_space": {"learning_rate": {"type": "double", "max": 8}}},
     "search_space.learning_rate.min: must be a finite number"),
    ({"hyperband__eta": 1}, "hyperband.eta: must be in [2, 1000], got 1"),
    ({"hyperband__max_resource": 0.5}, "hyperband.max_resource: must be a number in [1, 1000000]"),
    ({"hyperband__steps_per_unit": 0}, "hyperband.steps_per_unit: must be in [1, 1000000000]"),
    ({"hyperband__brackets": [5]}, "no bracket s=[5] for max_resource=9"),
    ({"hyperband__brackets": "all"}, "hyperband.brackets: must be a non-empty list"),
    ({"hyperband__rungs": 3}, "hyperband.rungs: unknown field"),
    ({"hyperband__max_gpus_per_job": 65}, "hyperband.max_gpus_per_job: must be in [1, 64]"),
    ({"hyperband": [1, 2]}, "hyperband: must be a mapping"),
    ({"job__batch_size": 0}, "job.batch_size: must be an integer >= 1, got 0"),
    ({"job__dataset": "mnist"}, "job.dataset: must be one of digits, synthetic, got 'mnist'"),
    ({"job__step_time_ms": -5}, "job.step_time_ms: must be a number >= 0, got -5"),
    ({"job__dropout": 1.0}, "job.dropout: must be a number in [0, 1), got 1.0"),
    ({"job__gpus": 2}, "job.gpus: unknown setting"),
    ({"job__learning_rate": 0.1}, "job.learning_rate: is also in search_space"),
    ({"name": "lr\n"}, "got 'lr\\n'"),  # fullmatch: no trailing newline
    ({"hyperband__max_resource": 100000, "hyperband__eta": 2, "hyperband__brackets": None},
     "configurations, more than the limit of 10000"),
    ({"hyperband__steps_per_unit": 10**9}, "exceeds the limit of 1000000000"),
    ({"seed": 10**30}, "out of range"),  # refused by the loader (|x| <= 1e18)
    ({"job__step_time_ms": 1.5e300}, "out of range"),
    ({"objective": {"goal": "up"}}, "objective.goal: must be minimize or maximize"),
])
def test_bad_spec_names_the_field(tmp_path: Path, changes: dict[str, object],
                                  message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(spec(**changes)))
    with pytest.raises(SpecError) as exc:
        load_app_spec(path)
    assert message in str(exc.value)
    assert "bad.yaml" in str(exc.value)


def test_unreadable_and_malformed_spec_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        load_app_spec(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_app_spec(bad)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_app_spec(bad_json)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(SpecError, match="is empty"):
        load_app_spec(empty)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(SpecError, match="must be a mapping"):
        load_app_spec(listy)


def _load(tmp_path: Path, doc: dict[str, object], name: str = "d.yaml") -> AppSpec:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return load_app_spec(path)


def test_older_format_defaults_and_deprecation_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = _load(tmp_path, {"search_space": GOOD["search_space"]})
    assert isinstance(s, AppSpec) and s.name == "d" and s.hyperband.brackets == (1,)
    assert (s.hyperband.max_resource, s.hyperband.eta, s.hyperband.steps_per_unit) == (3, 3, 30)
    err = capsys.readouterr().err
    assert "deprecated" in err and "themis submit --dry-run" in err
    s2 = _load(tmp_path, {"search_space": GOOD["search_space"],
                          "hyperband": {"max_resource": 9}})
    assert s2.hyperband.brackets is None  # all brackets of the new R
    s3 = _load(tmp_path, {"search_space": GOOD["search_space"], "hyperband": {"eta": 4}})
    assert s3.hyperband.brackets is None and s3.planned_steps() == 3 * 30


def test_one_format_for_standalone_and_submit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The older standalone spec, converted, is the same app as its one-format spelling;
    the one format is read by standalone without a message, and submit --dry-run prints
    it (the conversion command the deprecation message names)."""
    old = _load(tmp_path, GOOD, "lr.yaml")
    capsys.readouterr()
    new_doc = {**GOOD_NEW, "standalone": {"submit_at_s": 0},
               "objective": {"metric": "eval_accuracy", "goal": "maximize", "target": 0.99}}
    new = _load(tmp_path, new_doc, "lr-new.yaml")
    assert capsys.readouterr().err == ""
    assert (new.search_space, new.hyperband, new.args, new.resources) == \
        (old.search_space, old.hyperband, old.args, old.resources)
    assert new.objective.maximize and new.objective.target == 0.99
    assert main(["submit", "--dry-run", str(tmp_path / "lr.yaml")]) == 0
    out, err = capsys.readouterr()
    assert "deprecated" in err
    converted = json.loads(out)
    assert converted["job"] == {"args": GOOD["job"], "env": {}, "max_restarts": 3}
    path = tmp_path / "converted.json"
    path.write_text(out)
    assert load_app_spec(path) == old  # the conversion round-trips
    assert capsys.readouterr().err == ""
    # YARN runs the bundled job from job.args
    assert "--batch-size 16" in old.job_command() and "{learning_rate}" in old.job_command()


def test_one_format_names_every_bad_field_at_once(tmp_path: Path) -> None:
    doc = {"name": "x", "search_space": GOOD["search_space"],
           "job": {"args": {"batch_size": 0, "colour": 1}},
           "objective": {"metric": "has space", "target": "high"},
           "standalone": {"submit_at_s": -1, "when": 3}}
    with pytest.raises(SpecError) as exc:
        _load(tmp_path, doc)
    fields = [f for f, _ in exc.value.problems]
    assert fields == ["job.args.batch_size", "job.args.colour", "objective.metric",
                      "objective.target", "standalone.when", "standalone.submit_at_s"]


# --------------------------------------------------------------------------- CLI options
def test_help_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["standalone", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for opt in ("--cluster", "--machines", "--gpus-per-machine", "--racks", "--apps", "--app",
                "--max-resource", "--eta", "--steps-per-unit", "--step-time-ms",
                "--max-gpus-per-job", "--stagger-s", "--lease-s",
                "--fairness-knob", "--bid-timeout-s", "--warning-s", "--grace-s", "--solver",
                "--seed", "--port", "--out", "--display", "--refresh-s", "--timeout-s",
                "--shutdown-timeout-s", "--no-plot", "THEMIS_GPU_IDS", "SIGTERM",
                "Exit status"):
        assert opt in out, opt
    assert "standalone" in build_parser().format_help()


def test_help_states_every_default() -> None:
    parser = argparse.ArgumentParser()
    from themis.standalone.cli import add_parser

    add_parser(parser.add_subparsers())
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    p = sub.choices["standalone"]
    text = p.format_help()
    assert "default 2 x 2 GPUs" in text
    for action in p._actions:
        if not action.option_strings or action.required or action.dest in (
                "help", "cluster", "app"):  # no default: required, or an alternative input
            continue
        assert "default" in (p._get_formatter()._expand_help(action)), action.option_strings


@pytest.mark.parametrize(("argv", "message"), [
    (["--fairness-knob", "1.0"], "--fairness-knob: must be in [0, 1)"),
    (["--fairness-knob", "x"], "--fairness-knob: 'x' is not a number"),
    (["--lease-s", "0"], "--lease-s: must be a number > 0"),
    (["--lease-s", "nan"], "--lease-s: must be a number > 0"),
    (["--apps", "0"], "--apps: must be an integer >= 1"),
    (["--machines", "-1"], "--machines: must be an integer >= 1"),
    (["--port", "70000"], "--port: must be in 0..65535"),
    (["--display", "fancy"], "--display: invalid choice"),
    (["--stagger-s", "-1"], "--stagger-s: must be a number >= 0"),
    (["--max-gpus-per-job", "0"], "--max-gpus-per-job: must be an integer >= 1"),
])
def test_bad_option_values_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                  argv: list[str], message: str) -> None:
    code, err = run_cli(capsys, "--out", str(tmp_path / "o"), *argv)
    assert code == 2
    assert message in err


def test_out_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(capsys, "--apps", "1")
    assert code == 2 and "--out" in err


def _opts(tmp_path: Path, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    from themis.standalone.cli import add_parser

    add_parser(sub)
    return parser.parse_args(["standalone", "--out", str(tmp_path / "out"), *argv])


def test_build_options_defaults(tmp_path: Path) -> None:
    o = build_options(_opts(tmp_path))
    assert len(o.cluster.topology()) == 4 and [a.name for a in o.apps] == ["app-0", "app-1", "app-2"]
    assert [a.submit_at_s for a in o.apps] == [0, 15, 30]
    assert o.lease_s == 40 and o.fairness_knob == 0.8 and o.ideal_time == "exact"
    o1 = build_options(_opts(tmp_path, "--stagger-s", "0", "--max-gpus-per-job", "1",
                             "--steps-per-unit", "10"))
    assert [a.submit_at_s for a in o1.apps] == [0, 0, 0]
    assert {a.resources.gpus for a in o1.apps} == {1}
    assert o1.apps[0].planned_steps() == 2 * 10 + 10
    assert build_options(_opts(tmp_path, "--ideal-time", "paper")).ideal_time == "paper"
    o2 = build_options(_opts(tmp_path, "--machines", "2", "--gpus-per-machine", "2",
                             "--apps", "3", "--racks", "2"))
    assert len(o2.cluster.topology()) == 4 and len(o2.apps) == 3


@pytest.mark.parametrize(("setup", "argv", "message"), [
    (None, ["--cluster", "{tmp}/nope.json"], "cluster spec"),
    ("cluster.json:{\"racks\": []}", ["--cluster", "{tmp}/cluster.json"],
     "'racks' must be a non-empty list"),
    ("cluster.yaml:racks: [{name: r0, machines: [{name: m0, gpus: 0}]}]",
     ["--cluster", "{tmp}/cluster.yaml"], "machine 'm0': gpus=0 must be an int >= 1"),
    ("cluster.yaml:racks: [{name: r0, machines: [{name: m0, gpus: 2}]}]",
     ["--cluster", "{tmp}/cluster.yaml", "--machines", "2"],
     "--cluster and --machines are mutually exclusive"),
    (None, ["--machines", "1", "--racks", "2"], "--racks 2 is more than --machines 1"),
    ("a.yaml:" + json.dumps(GOOD_NEW), ["--apps", "2", "--app", "{tmp}/a.yaml"],
     "--apps and --app are mutually exclusive"),
    ("a.yaml:" + json.dumps(GOOD_NEW), ["--app", "{tmp}/a.yaml", "--app", "{tmp}/a.yaml"],
     "app name 'lr' is used by more than one app"),
    (None, ["--app", "{tmp}/missing.yaml"], "missing.yaml"),
    (None, ["--lease-s", "20", "--lease-spread-s", "30"],
     "--lease-spread-s 30 is more than --lease-s 20"),
    (None, ["--eta", "1"], "--eta must be an integer >= 2"),
    (None, ["--max-resource", "0.5"], "--max-resource must be a number >= 1, got 0.5"),
    (None, ["--max-gpus-per-job", "65"], "--max-gpus-per-job must be an integer in [1, 64], "
                                         "got 65"),
    (None, ["--solver", "magic"], "unknown solver 'magic'"),
    ("out:not a directory", [], "exists and is not a directory"),
    ("out/apps/x/f:old run", [], "already holds a run"),
])
def test_bad_inputs_exit_2_naming_the_problem(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, setup: str | None, argv: list[str],
    message: str,
) -> None:
    if setup is not None:
        name, _, text = setup.partition(":")
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, err = run_cli(capsys, "--out", str(tmp_path / "out"), *argv)
    assert code == 2, err
    assert err.startswith("themis standalone: error: ")
    assert message in err, err
    assert "Traceback" not in err


# --------------------------------------------------------------------------- report, view
def test_gpu_moves_distinguish_lease_expiry_from_release() -> None:
    rounds = [
        {"round": 1, "grants": [{"app": "a", "gpus": ["g0", "g1"], "start": 0.0, "expiry": 10.0},
                                {"app": "b", "gpus": ["g2"], "start": 0.0, "expiry": 10.0}]},
        {"round": 2, "grants": [{"app": "b", "gpus": ["g0"], "start": 10.02, "expiry": 20.0},
                                {"app": "a", "gpus": ["g1"], "start": 10.02, "expiry": 20.0}]},
        {"round": 3, "grants": [{"app": "b", "gpus": ["g1"], "start": 14.0, "expiry": 24.0}]},
    ]
    moves = gpu_moves(rounds)
    assert [(m["gpu"], m["from"], m["to"], m["at_lease_expiry"]) for m in moves] == [
        ("g0", "a", "b", True), ("g1", "a", "b", False)]


def test_held_steps_and_overlap_of_two_apps() -> None:
    report = {"duration_s": 30.0, "apps": {
        "a": {"held": [[0.0, ["g0", "g1"]], [10.0, []], [20.0, ["g0"]]]},
        "b": {"held": [[5.0, ["g2"]], [25.0, []]]},
    }}
    times, stacks = held_steps(report)
    assert times == [0.0, 5.0, 10.0, 20.0, 25.0, 30.0]
    assert stacks == {"a": [2, 2, 0, 1, 1, 1], "b": [0, 1, 1, 1, 0, 0]}
    assert held_at(report["apps"]["a"], 9.9) == 2 and held_at(report["apps"]["b"], 4.0) == 0
    assert overlap_s(report) == 5.0 + 5.0  # 5-10 s and 20-25 s
    assert overlap_s(report, min_apps=1) == 30.0


def test_display_rows_and_lines_mode(tmp_path: Path) -> None:
    path = tmp_path / "view.txt"
    with open(path, "w") as stream:
        d = Display(stream, "auto", 0.1)  # not a terminal: lines
        assert d.mode == "lines"
        d.event("a: round 1: +2 GPU (auction)", 1.5)
        d.update("header", [{"name": "a", "state": "running", "rho": 1.5,
                             "rho_reported": float("inf"), "gpus": ["m0-g0"], "running": 1,
                             "waiting": 2, "done": 0, "progress": 0.25}], now=10.0)
    text = path.read_text()
    assert "[    1.5s] a: round 1" in text
    assert "1.50" in text and "inf" in text and "m0-g0" in text and "25%" in text


# --------------------------------------------------------------------------- app master
def test_assignment_is_sticky_and_prefers_running_jobs(tmp_path: Path) -> None:
    import time

    from themis.am.launchers.local.appmaster import AppMaster
    from themis.am.launchers.local.jobs import Segment
    from themis.arbiter.cluster_backend import uniform_cluster

    topo = uniform_cluster(2, 2).topology()
    app = default_app(0, max_resource=3, eta=3, steps_per_unit=20, max_gpus_per_job=1)
    am = AppMaster(app, "127.0.0.1:1", tmp_path, topo, t0=time.time())  # 3 one-GPU jobs
    am._sync_jobs()
    jobs = sorted(am.runners)
    assert len(jobs) == 3
    first = am._assign(["m0-g0", "m0-g1", "m1-g0"])
    assert sorted(first) == jobs and sorted(g for v in first.values() for g in v) == [
        "m0-g0", "m0-g1", "m1-g0"]
    # the last job runs on m1-g0; the app now holds m1-g0 and m1-g1 only
    r = am.runners[jobs[2]]
    r.proc = object()  # type: ignore[assignment]  # a live process, for the planner
    r.segments.append(Segment(0, ("m1-g0",), time.time(), 20))
    second = am._assign(["m1-g0", "m1-g1"])
    assert second[jobs[2]] == ("m1-g0",)  # kept its GPU: no restart
    assert len(second) == 2 and sorted(g for v in second.values() for g in v) == [
        "m1-g0", "m1-g1"]
    # with a single GPU left elsewhere, the running job is not the one kept
    third = am._assign(["m0-g0"])
    assert len(third) == 1 and jobs[2] not in third
    r.proc = None


def test_port_in_use_exits_2_before_starting_anything(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import importlib.util
    import socket

    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("the TensorFlow check comes first")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        code, err = run_cli(capsys, "--out", str(tmp_path / "out"), "--port", str(port),
                            "--display", "off")
    assert code == 2, err
    assert f"cannot start the arbiter on 127.0.0.1:{port}" in err
    assert not (tmp_path / "out" / "apps").exists()


def test_docker_images_are_refused_in_standalone(tmp_path: Path) -> None:
    path = tmp_path / "img.yaml"
    path.write_text(json.dumps({
        "name": "img", "kind": "single-job", "max_steps": 10,
        "job": {"command": "python3 train.py", "docker_image": "tf:2"},
        "tasks": {"workers": 2, "ps": {"count": 1, "docker_image": "tf-ps:2"}}}))
    with pytest.raises(SpecError) as exc:
        load_app_spec(path)
    text = str(exc.value)
    assert "job.docker_image: is YARN's" in text and "tasks.ps.docker_image" in text, text
    assert "img.yaml" in text
