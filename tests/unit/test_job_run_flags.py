"""``themis job run``: Submarine's ``job run`` flags mapped onto a single-job spec, and the
flags Themis refuses, each with its reason (docs/am.md, "themis job run")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from themis.am.command import render_command
from themis.am.spec import parse_spec
from themis.cli import main
from themis.client.cli import REFUSED_FLAGS

BASE = ["job", "run", "--name", "mnist", "--dry-run"]


def _spec(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    assert main([*BASE, *flags]) == 0, capsys.readouterr().err
    d: dict[str, Any] = json.loads(capsys.readouterr().out)
    return d


def _refused(capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    assert main([*BASE, *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing submitted, no spec printed
    return captured.err


def test_command_without_placeholders_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    d = _spec(capsys, "--worker_launch_cmd", "python3 /opt/train.py --epochs 3")
    assert d["kind"] == "single-job" and d["max_steps"] == 1000
    assert d["job"]["command"] == "python3 /opt/train.py --epochs 3"
    assert d["resources"] == {"gpus": 1, "memory_mb": 1024, "vcores": 1}


def test_submarine_substitutions(capsys: pytest.CaptureFixture[str]) -> None:
    cmd = "python3 t.py --data %input_path% --ckpt %checkpoint_path%"
    d = _spec(capsys, "--worker_launch_cmd", cmd, "--input_path", "hdfs:///data/{v1}")
    spec = parse_spec(d)
    # %checkpoint_path% without --checkpoint_path: the checkpoint dir Themis keeps
    assert render_command(spec, {"checkpoint_dir": "checkpoints"}) == (
        "python3 t.py --data hdfs:///data/{v1} --ckpt checkpoints")
    d = _spec(capsys, "--worker_launch_cmd", cmd, "--input_path", "/in",
              "--checkpoint_path", "hdfs:///mine")
    assert d["job"]["command"] == "python3 t.py --data /in --ckpt hdfs:///mine"
    err = _refused(capsys, "--worker_launch_cmd", cmd)
    assert "--input_path: is required: --worker_launch_cmd uses %input_path%" in err


def test_resources_env_queue_steps(capsys: pytest.CaptureFixture[str]) -> None:
    d = _spec(capsys, "--worker_launch_cmd", "x", "--worker_resources",
              "memory=2G,vcores=2,gpu=2", "--env", "A=b=c", "--env", "B=", "--queue", "q1",
              "--max_steps", "300", "--framework", "TensorFlow", "--insecure")
    assert d["resources"] == {"gpus": 2, "memory_mb": 2048, "vcores": 2}
    assert d["job"]["env"] == {"A": "b=c", "B": ""}
    assert d["queue"] == "q1" and d["max_steps"] == 300


def test_docker_images_go_to_the_spec(capsys: pytest.CaptureFixture[str]) -> None:
    d = _spec(capsys, "--worker_launch_cmd", "x", "--docker_image", "reg.local:5000/ml/tf:2.16")
    assert d["job"]["docker_image"] == "reg.local:5000/ml/tf:2.16" and "tasks" not in d
    d = _spec(capsys, "--worker_launch_cmd", "x", "--num_workers", "2", "--num_ps", "1",
              "--docker_image", "tf:2", "--worker_docker_image", "tf-gpu:2")
    assert d["job"]["docker_image"] == "tf-gpu:2"
    assert d["tasks"]["ps"]["docker_image"] == "tf:2"
    spec = parse_spec(d)
    assert spec.docker_image_of("worker") == "tf-gpu:2" and spec.docker_image_of("ps") == "tf:2"
    d = _spec(capsys, "--worker_launch_cmd", "x", "--num_ps", "1", "--ps_docker_image", "ps:1")
    assert "docker_image" not in d["job"] and d["tasks"]["ps"]["docker_image"] == "ps:1"
    assert parse_spec(d).docker_image_of("worker") == ""


def test_verbose_prints_the_spec_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--worker_launch_cmd", "x", "--verbose"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(err) == json.loads(out)


def test_tensorboard_asks_for_the_apps_tensorboard_container(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import themis.client.cli as cli

    specs: list[Any] = []

    def submit(args: Any, spec: Any) -> int:
        specs.append(spec)
        print("application_1_0001")
        args.after_submit(args, "application_1_0001")
        return 0

    monkeypatch.setattr(cli, "_submit_spec", submit)
    assert main(["job", "run", "--name", "m", "--worker_launch_cmd", "x", "--tensorboard"]) == 0
    out, err = capsys.readouterr()
    assert out == "application_1_0001\n"
    assert "themis status application_1_0001" in err
    assert "themis logs application_1_0001 --tensorboard" in err
    assert specs[0].tensorboard is not None and specs[0].tensorboard.memory_mb == 1024
    monkeypatch.undo()
    d = _spec(capsys, "--worker_launch_cmd", "x", "--tensorboard", "--tensorboard_resources",
              "memory=2G,vcores=2", "--tensorboard_docker_image", "tensorflow/tensorflow:2.16.1")
    assert d["tensorboard"] == {"memory_mb": 2048, "vcores": 2,
                                "docker_image": "tensorflow/tensorflow:2.16.1"}
    assert "tensorboard" not in _spec(capsys, "--worker_launch_cmd", "x")


@pytest.mark.parametrize("flags, field, words", [
    (["--num_workers", "65"], "--num_workers", "must be in [1, 64]"),
    (["--num_ps", "-1"], "--num_ps", "must be in [0, 64]"),
    (["--num_workers", "2", "--worker_resources", "gpu=40"], "tasks.workers",
     "80 GPUs per job, more than 64"),
    (["--docker_image", "TF:2"], "job.docker_image", "not a Docker image reference"),
    (["--worker_docker_image", "tf 2"], "job.docker_image", "not a Docker image reference"),
    (["--ps_docker_image", "tf:2"], "--ps_docker_image", "needs parameter servers"),
    (["--ps_launch_cmd", "x"], "--ps_launch_cmd", "needs parameter servers"),
    (["--ps_resources", "memory=1G"], "--ps_resources", "needs parameter servers"),
    (["--tensorboard_docker_image", "tb"], "--tensorboard_docker_image", "needs --tensorboard"),
    (["--tensorboard_resources", "memory=1G"], "--tensorboard_resources",
     "needs --tensorboard"),
    (["--tensorboard", "--tensorboard_resources", "gpu=1"], "--tensorboard_resources",
     "TensorBoard gets no GPU"),
    (["--tensorboard", "--tensorboard_resources", "memory=64M"], "tensorboard.memory_mb",
     "in [128, 1048576]"),
    (["--framework", "pytorch"], "--framework", "only tensorflow"),
    (["--keytab", "/k"], "--keytab", "Kerberos"),
    (["--distribute_keytab"], "--distribute_keytab", "Kerberos"),
    (["--localization", "hdfs:///a:b"], "--localization", "not supported"),
    (["--worker_resources", "memory=1G,fpga=1"], "--worker_resources", "unknown resource"),
    (["--worker_resources", "gpu=1.5"], "--worker_resources", "not an integer"),
    (["--env", "NOVALUE"], "--env", "NAME=VALUE"),
    (["--env", "=x"], "--env", "NAME=VALUE"),
    (["--worker_resources", "gpu=0"], "resources.gpus", "in [1, 64]"),
    (["--max_steps", "0"], "max_steps", "in [1, 1000000000]"),
])
def test_refused_flags_name_the_flag_and_the_reason(
        capsys: pytest.CaptureFixture[str], flags: list[str], field: str, words: str) -> None:
    err = _refused(capsys, "--worker_launch_cmd", "x", *flags)
    assert f"{field}: " in err and words in err, err


def test_every_refused_flag_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in REFUSED_FLAGS:
        value = [] if flag == "distribute_keytab" else ["v"]
        err = _refused(capsys, "--worker_launch_cmd", "x", f"--{flag}", *value)
        assert f"--{flag}: " in err


def test_unknown_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([*BASE, "--worker_launch_cmd", "x", "--no_such_flag", "1"])
    assert e.value.code == 2
    assert "--no_such_flag" in capsys.readouterr().err


def test_status_shows_the_tensorboard_url_and_why_an_app_failed() -> None:
    from themis.client.cli import _render

    st: dict[str, Any] = {"jobs": [], "objective": {"metric": "eval_loss"},
                          "tensorboard": {"state": "running", "url": "http://nm1:40001/",
                                          "message": ""}}
    lines = _render({"id": "application_1_0001", "name": "a", "state": "RUNNING",
                     "finalStatus": "UNDEFINED"}, st, detail=False)
    assert "    TensorBoard: http://nm1:40001/" in lines
    st["tensorboard"] = {"state": "failed", "url": None, "message": "exited 4 times"}
    assert "    TensorBoard: failed (exited 4 times)" in _render(
        {"id": "x", "name": "a"}, st, detail=False)
    # a failed app: the AM's message (else YARN's diagnostics) under its line
    app = {"id": "application_1_0002", "name": "img", "state": "FINISHED",
           "finalStatus": "FAILED", "diagnostics": "AM container exited"}
    failed = _render(app, {"jobs": [], "message": "nm2:8041: no Docker runtime"}, False)
    assert failed[1] == "    nm2:8041: no Docker runtime", failed
    assert _render(app, None, False)[1] == "    AM container exited"
    ok = {**app, "finalStatus": "SUCCEEDED"}
    assert len(_render(ok, None, False)) == 1
