"""The app spec: valid specs round-trip; invalid ones are refused naming field and problem,
by ``parse_spec`` and by ``themis submit`` (before any cluster call)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from themis.am.command import render_command
from themis.am.spec import AppSpec, parse_spec
from themis.am.speccheck import SpecError
from themis.am.specfile import load_spec
from themis.cli import main

CMD = ("python3 -m themis.jobs.train --job-id {job_id} --logdir {logdir} --max-steps "
       "{max_steps} --checkpoint-uri {checkpoint_uri} --learning-rate {lr} --optimizer {opt}")


def good() -> dict[str, Any]:
    return {
        "name": "digits-hb",
        "search_space": {
            "lr": {"type": "double", "min": 1e-4, "max": 1e-1, "scale": "log"},
            "units": {"type": "int", "min": 16, "max": 128, "scale": "linear"},
            "opt": {"type": "categorical", "values": ["adam", "sgd"]},
        },
        "hyperband": {"max_resource": 9, "eta": 3, "steps_per_unit": 20, "brackets": [1]},
        "job": {"command": CMD, "env": {"A": 1}},
        "resources": {"gpus": 1, "memory_mb": 512, "vcores": 1},
    }


def test_valid_spec_round_trips_and_sizes() -> None:
    spec = parse_spec(good())
    assert AppSpec.from_json(spec.to_json()) == spec
    assert spec.max_concurrent_jobs() == 5  # bracket s=1 of R=9, eta=3 starts 5 configs
    assert spec.max_gpus() == 5
    assert spec.env == {"A": "1"}
    hb = spec.make_hyperband("app")
    assert len(hb.jobs) == 5
    single = parse_spec({"name": "one", "kind": "single-job", "max_steps": 50,
                         "job": {"command": "train {max_steps} {checkpoint_uri}"}})
    assert [j.target_steps for j in single.make_hyperband("x").jobs.values()] == [50]


def test_task_group_round_trips_and_sizes_the_job() -> None:
    raw = {**good(), "resources": {"gpus": 2},
           "tasks": {"workers": 3, "ps": {"count": 1, "memory_mb": 2048,
                                          "command": "ps-server {job_id}"}}}
    spec = parse_spec(raw)
    assert AppSpec.from_json(spec.to_json()) == spec
    assert (spec.workers, spec.ps.count, spec.ps.memory_mb, spec.ps.vcores) == (3, 1, 2048, 1)
    assert spec.gang and spec.job_gpus() == 6 and spec.max_gpus() == 5 * 6
    assert {j.max_demand for j in spec.make_hyperband("a").to_app_model(0.0).jobs} == {6}
    assert render_command(spec, {"job_id": "j1"}, "ps") == "ps-server j1"
    # without a task group: the single-process job of before, and no tasks section
    plain = parse_spec(good())
    assert not plain.gang and plain.job_gpus() == 1 and "tasks" not in plain.to_dict()
    assert parse_spec({**good(), "tasks": {"workers": 1}}) == plain


def _problems(mutate: Any) -> list[tuple[str, str]]:
    raw = good()
    mutate(raw)
    with pytest.raises(SpecError) as e:
        parse_spec(raw)
    return e.value.problems


@pytest.mark.parametrize("mutate, field, words", [
    (lambda r: r["hyperband"].update(eta=1), "hyperband.eta", "must be in [2, 1000]"),
    (lambda r: r["hyperband"].update(max_resource=0.5), "hyperband.max_resource",
     "in [1, 1000000]"),
    (lambda r: r["hyperband"].update(brackets=[7]), "hyperband.brackets", "no bracket s=[7]"),
    (lambda r: r["search_space"]["lr"].update(min=0), "search_space.lr.min",
     "log scale needs min > 0"),
    (lambda r: r["search_space"]["lr"].update(scale="exp"), "search_space.lr.scale",
     "'linear' or 'log'"),
    (lambda r: r["search_space"]["units"].update(min=1.5), "search_space.units.min",
     "must be an integer"),
    (lambda r: r["search_space"]["units"].update(min=200), "search_space.units", "min 200 > max"),
    (lambda r: r["search_space"]["opt"].update(values=[]), "search_space.opt.values",
     "non-empty list"),
    (lambda r: r["search_space"].update(x={"type": "float"}), "search_space.x.type",
     "double, int or categorical"),
    (lambda r: r["search_space"].update(max_steps={"type": "int", "min": 1, "max": 2}),
     "search_space.max_steps", "reserved"),
    (lambda r: r.update(search_space={}), "search_space", "at least one parameter"),
    (lambda r: r["job"].update(command=CMD + " {nope}"), "job.command",
     "unknown placeholder {nope}"),
    (lambda r: r["job"].update(command=CMD + " {"), "job.command", "placeholder syntax"),
    (lambda r: r.pop("job"), "job", "is required"),
    (lambda r: r["resources"].update(gpus=0), "resources.gpus", "in [1, 64]"),
    (lambda r: r["resources"].update(memory_mb="lots"), "resources.memory_mb",
     "must be an integer"),
    (lambda r: r.update(name="bad name!"), "name", "must match"),
    (lambda r: r.update(kind="grid"), "kind", "hyperband, single-job"),
    (lambda r: r.update(colour="red"), "colour", "unknown field"),
    (lambda r: r["hyperband"].update(speed=2), "hyperband.speed", "unknown field"),
    (lambda r: r.update(max_steps=10), "max_steps", "only for kind single-job"),
    (lambda r: r["job"].update(env={"1X": "a"}), "job.env.1X", "not a valid"),
    (lambda r: r.update(am={"max_attempts": 0}), "am.max_attempts", "in [1, 10]"),
    (lambda r: r.update(tasks={"workers": 0}), "tasks.workers", "in [1, 64]"),
    (lambda r: r.update(tasks={"workers": "two"}), "tasks.workers", "must be an integer"),
    (lambda r: r.update(tasks={"chiefs": 1}), "tasks.chiefs", "unknown field"),
    (lambda r: r.update(tasks={"ps": {"memory_mb": 512}}), "tasks.ps.count", "is required"),
    (lambda r: r.update(tasks={"ps": {"count": 1, "gpus": 1}}), "tasks.ps.gpus",
     "unknown field"),
    (lambda r: r.update(tasks={"ps": {"count": 1, "vcores": 0}}), "tasks.ps.vcores",
     "in [1, 1024]"),
    (lambda r: r.update(tasks={"ps": {"count": 1, "command": "ps {nope}"}}),
     "tasks.ps.command", "unknown placeholder {nope}"),
    (lambda r: r.update(tasks={"ps": 2}), "tasks.ps", "must be a mapping"),
    (lambda r: r.update(tasks={"workers": 8}, resources={"gpus": 16}), "tasks.workers",
     "128 GPUs per job, more than 64"),
    (lambda r: (r.update(tasks={"workers": 2}), r["job"].pop("command"),
                r["job"].update(args={})), "tasks", "needs job.command"),
])
def test_invalid_spec_names_field_and_problem(mutate: Any, field: str, words: str) -> None:
    problems = _problems(mutate)
    assert any(f == field and words in p for f, p in problems), problems


def test_every_problem_is_reported_at_once() -> None:
    def two(r: dict[str, Any]) -> None:
        r["hyperband"]["eta"] = 0
        r["resources"]["vcores"] = 0

    fields = {f for f, _ in _problems(two)}
    assert {"hyperband.eta", "resources.vcores"} <= fields


def test_single_job_needs_max_steps() -> None:
    with pytest.raises(SpecError) as e:
        parse_spec({"name": "one", "kind": "single-job",
                    "job": {"command": "x {max_steps} {checkpoint_uri}"}})
    assert ("max_steps", "is required") in e.value.problems


def test_submit_refuses_invalid_spec_before_contacting_the_cluster(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import themis.client.cluster as client

    def boom(*a: Any, **k: Any) -> Any:
        raise AssertionError("the cluster must not be contacted for an invalid spec")

    monkeypatch.setattr(client.Cluster, "submit", boom)
    monkeypatch.setattr(client.Cluster, "rm_conf", boom)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsearch_space: {lr: {type: double, min: 1, max: 0}}\n"
                   "job: {command: 'train {max_steps} {checkpoint_uri} {lr}'}\n")
    assert main(["submit", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "search_space.lr" in err and "min 1 > max 0" in err
    notyaml = tmp_path / "n.yaml"
    notyaml.write_text("name: [unclosed\n")
    assert main(["submit", str(notyaml)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["submit", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_job_run_flags_build_a_single_job_spec(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["job", "run", "--name", "mnist", "--worker_resources", "memory=2G,vcores=2,gpu=2",
               "--worker_launch_cmd", "python3 -m themis.jobs.train --max-steps {max_steps} "
               "--checkpoint-uri {checkpoint_uri} --logdir {logdir}", "--max_steps", "300",
               "--env", "A=b", "--dry-run"])
    assert rc == 0
    import json

    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "single-job" and d["max_steps"] == 300
    assert d["resources"] == {"gpus": 2, "memory_mb": 2048, "vcores": 2}
    assert d["job"]["env"] == {"A": "b"}
    rc = main(["job", "run", "--name", "m", "--num_workers", "3", "--worker_launch_cmd",
               "python3 w.py --ckpt %checkpoint_path%", "--num_ps", "2", "--ps_resources",
               "memory=2G,vcores=2", "--ps_launch_cmd", "python3 ps.py %input_path%",
               "--input_path", "hdfs:///d", "--dry-run"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["tasks"] == {"workers": 3, "ps": {"count": 2, "memory_mb": 2048, "vcores": 2,
                                               "command": "python3 ps.py hdfs:///d"}}
    assert d["job"]["command"] == "python3 w.py --ckpt {checkpoint_dir}"
    for flags, field, words in (
            (["--num_workers", "0"], "--num_workers", "must be in [1, 64]"),
            (["--ps_launch_cmd", "ps"], "--ps_launch_cmd", "needs parameter servers"),
            (["--num_ps", "1", "--ps_resources", "gpu=1"], "--ps_resources",
             "parameter servers get no GPU"),
            (["--num_ps", "1", "--ps_resources", "disk=1"], "--ps_resources",
             "unknown resource 'disk'")):
        rc = main(["job", "run", "--name", "m", "--worker_launch_cmd", "x", *flags,
                   "--dry-run"])
        assert rc == 2
        err = capsys.readouterr().err
        assert f"{field}: {words}" in err, err


def test_load_spec_example_file() -> None:
    root = Path(__file__).resolve().parents[2]
    files = sorted([*(root / "examples" / "am").glob("*.yaml"),
                    *(root / "examples" / "standalone").glob("*.yaml")])
    assert len(files) >= 3
    for p in files:  # one format: every example is read without a deprecation message
        load_spec(p, warn=lambda msg, p=p: pytest.fail(f"{p}: {msg}"))


# ------------------------------------------------------------------ bounded input (limits)
@pytest.mark.parametrize("mutate, field, words", [
    (lambda r: r.update(name="digits\n"), "name", "must match"),
    (lambda r: r.update(queue="root.a\n"), "queue", "must match"),
    (lambda r: r["job"].update(env={"A\n": "x"}), "job.env.A\n", "not a valid"),
    (lambda r: r["resources"].update(memory_mb=10**12), "resources.memory_mb",
     "in [128, 1048576]"),
    (lambda r: r["resources"].update(vcores=10**6), "resources.vcores", "in [1, 1024]"),
    (lambda r: r["hyperband"].update(max_resource=1048576, eta=2), "hyperband.max_resource",
     "in [1, 1000000]"),
    (lambda r: r["hyperband"].update(max_resource=100000, eta=2, brackets=None),
     "hyperband", "configurations, more than the limit of 10000"),
    (lambda r: r["hyperband"].update(steps_per_unit=2 * 10**8), "hyperband.steps_per_unit",
     "exceeds the limit of 1000000000"),
    (lambda r: r["job"].update(command=CMD.replace("{max_steps}", "{max_steps!z}")),
     "job.command", "no conversion or format spec"),
    (lambda r: r["job"].update(command=CMD + " {job_id.__init__.__globals__}"),
     "job.command", "only {name} is allowed"),
    (lambda r: r["job"].update(command=CMD.replace("{max_steps}", "{max_steps:>1000000000}")),
     "job.command", "no conversion or format spec"),
    (lambda r: r["job"].update(command=CMD + " {lr[0]}"), "job.command",
     "only {name} is allowed"),
    (lambda r: r["job"].update(command=CMD + " {0}"), "job.command", "only {name}"),
    (lambda r: r["search_space"].update(é={"type": "int", "min": 1, "max": 2}),
     "search_space.é", "ASCII identifiers"),
    (lambda r: r["search_space"]["units"].update(max=10**30), "search_space.units.max",
     "|x| <= 1e18"),
])
def test_limits_name_field_and_problem(mutate: Any, field: str, words: str) -> None:
    raw = good()
    mutate(raw)
    if raw["hyperband"].get("brackets", 0) is None:
        del raw["hyperband"]["brackets"]
    with pytest.raises(SpecError) as e:
        parse_spec(raw)
    assert any(f == field and words in p for f, p in e.value.problems), e.value.problems


def test_command_is_rendered_by_the_restricted_formatter() -> None:
    from themis.am.command import render_command

    raw = good()
    raw["job"]["command"] = CMD + " --literal {{x}}"
    spec = parse_spec(raw)
    out = render_command(spec, {"job_id": "j 1", "logdir": "tflogs", "max_steps": 30,
                                "checkpoint_uri": "hdfs:///c", "lr": 0.01, "opt": "adam"})
    assert out == ("python3 -m themis.jobs.train --job-id 'j 1' --logdir tflogs --max-steps 30 "
                   "--checkpoint-uri hdfs:///c --learning-rate 0.01 --optimizer adam "
                   "--literal {x}")


BOMB = "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 9 if p else ['lol'] * 9)}]\n"
    for p, k in zip(["", *"abcdefgh"], "abcdefghi", strict=True))


@pytest.mark.parametrize("text, words", [
    (BOMB, "more than 100000 values (aliases expanded)"),
    ("name: a\nname: b\n", "duplicate key 'name'"),
    ("name: &x [*x]\n", "recursive alias"),
    ("name: " + "9" * 5000 + "\n", "is out of range"),
    ("name: " + "[" * 2000 + "\n", "nesting deeper than the limit of 32"),
    ("x" * (1 << 20) + "y", "exceed the size limit of 1048576"),
])
def test_submit_dry_run_refuses_hostile_files_in_one_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: str) -> None:
    import time

    p = tmp_path / "spec.yaml"
    p.write_text(text)
    # refused without expanding the file: bounded work, counted in this process's CPU
    # seconds (not wall time, which a loaded machine stretches: 23 s seen beside a sweep)
    t0 = time.process_time()
    assert main(["submit", "--dry-run", str(p)]) == 2
    assert time.process_time() - t0 < 5
    out, err = capsys.readouterr()
    assert out == "" and words in err and "Traceback" not in err


def test_submit_dry_run_refuses_non_utf8(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "spec.yaml"
    p.write_bytes(b"name: \xff\xfe\n")
    assert main(["submit", "--dry-run", str(p)]) == 2
    assert "not UTF-8 text (byte 0xff at offset 6)" in capsys.readouterr().err


def test_command_without_placeholders_is_accepted_and_gets_the_contract_env() -> None:
    from themis.am.command import CONTRACT_ENV, PLACEHOLDERS, contract_env

    spec = parse_spec({"name": "plain", "kind": "single-job", "max_steps": 10,
                       "job": {"command": "python3 train.py"}})
    assert render_command(spec, {"max_steps": 10}) == "python3 train.py"
    assert set(CONTRACT_ENV) == set(PLACEHOLDERS)
    assert contract_env({"max_steps": 10, "checkpoint_dir": "checkpoints", "other": 1}) == {
        "THEMIS_MAX_STEPS": "10", "THEMIS_CHECKPOINT_DIR": "checkpoints"}
