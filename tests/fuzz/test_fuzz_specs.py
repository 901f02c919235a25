"""Fuzzing the spec parsers: ``themis submit --dry-run`` (Submarine AM specs), standalone
app specs and command templates. Only the documented error (exit 2 / SpecError /
InputError); an accepted spec round-trips, renders its command and stays within the
plan limits."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import string
import tempfile
from collections.abc import Iterator
from typing import Any

import yaml
from hypothesis import event, given
from hypothesis import strategies as st

from tests.fuzz._fuzz import (
    HOSTILE_TEXT,
    YAML_SNIPPETS,
    byte_mutations,
    fuzz_settings,
    mutated,
)
from themis.am import command, speccheck, specfile
from themis.am import spec as am
from themis.am.hyperband import plan_configurations
from themis.am.launchers.local import spec as standalone
from themis.cli import main
from themis.safeinput import InputError, Template

AM_SPEC: dict[str, Any] = {
    "name": "digits-hb", "queue": "default", "kind": "hyperband",
    "search_space": {
        "lr": {"type": "double", "min": 1e-4, "max": 1e-1, "scale": "log"},
        "units": {"type": "int", "min": 16, "max": 128, "scale": "linear"},
        "opt": {"type": "categorical", "values": ["adam", "sgd"]},
    },
    "hyperband": {"max_resource": 9, "eta": 3, "steps_per_unit": 20, "brackets": [1],
                  "seed": 0},
    "job": {"command": "train --id {job_id} --steps {max_steps} --ckpt {checkpoint_uri} "
                       "--lr {lr} --opt {opt} --units {units} {{literal}}",
            "env": {"A": 1, "B": "x"}, "max_restarts": 3,
            "docker_image": "reg.example.com:5000/ml/tf:2.16"},
    "resources": {"gpus": 1, "memory_mb": 512, "vcores": 1},
    "max_parallel_jobs": 4,
    "am": {"memory_mb": 768, "vcores": 1, "max_attempts": 2},
    "tensorboard": {"memory_mb": 1024, "vcores": 1, "docker_image": "tensorflow/tf:2.16"},
}
SINGLE_JOB: dict[str, Any] = {
    "name": "one", "kind": "single-job", "max_steps": 50,
    "job": {"command": "train {max_steps} {checkpoint_uri} {seed}"},
}
STANDALONE: dict[str, Any] = {
    "name": "lr", "seed": 3, "submit_at_s": 0,
    "hyperband": {"max_resource": 9, "eta": 3, "brackets": [2], "steps_per_unit": 10,
                  "max_gpus_per_job": 1},
    "search_space": {
        "learning_rate": {"type": "double", "min": 1e-4, "max": 1e-1, "scale": "log"},
        "hidden_units": {"type": "int", "min": 8, "max": 32},
        "optimizer": {"type": "categorical", "values": ["adam", "sgd"]},
    },
    "job": {"step_time_ms": 20, "batch_size": 16, "dataset": "synthetic"},
}
#: a template with anchors and aliases, and an alias bomb generator
ANCHORS = b"resources:\n  <<: &r {gpus: 1, memory_mb: 512, vcores: 1}\n  vcores: 2\n"


def bomb(levels: int, width: int) -> bytes:
    lines = [b"l0: &l0 [" + b", ".join([b"x"] * width) + b"]"]
    for k in range(1, levels):
        lines.append(f"l{k}: &l{k} [".encode() + b", ".join([f"*l{k - 1}".encode()] * width)
                     + b"]")
    return b"\n".join(lines) + b"\n"


@st.composite
def spec_files(draw: st.DrawFn, base: dict[str, Any]) -> tuple[bytes, str]:
    """(content, suffix): a mutated spec as YAML or JSON, maybe byte-mutated, maybe with
    anchors or an alias bomb appended."""
    doc = draw(mutated(copy.deepcopy(base)))
    suffix = draw(st.sampled_from([".yaml", ".json"]))
    extra = draw(st.sampled_from([b"", b"", ANCHORS,
                                  bomb(draw(st.integers(2, 9)), draw(st.integers(2, 9)))]))
    if extra == ANCHORS and isinstance(doc, dict):
        doc.pop("resources", None)  # given through an anchor and a merge key instead
    try:
        text = (json.dumps(doc) if suffix == ".json" else
                yaml.safe_dump(doc, allow_unicode=draw(st.booleans()))).encode(
                    "utf-8", "surrogatepass")
    except (ValueError, yaml.YAMLError):  # e.g. an integer too long to print
        text = b"{}"
    if extra and suffix == ".yaml" and isinstance(doc, dict):
        text += b"\n" + extra
    return draw(byte_mutations(text, YAML_SNIPPETS)), suffix


@contextlib.contextmanager
def spec_file(content: bytes, suffix: str) -> Iterator[str]:
    fd, path = tempfile.mkstemp(suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        yield path
    finally:
        os.unlink(path)


def check_am_spec(spec: am.AppSpec) -> None:
    """An accepted spec: round-trips, stays within the plan limits, renders its command."""
    assert am.parse_spec(spec.to_dict()) == spec
    assert speccheck._NAME_RE.fullmatch(spec.name)
    assert spec.max_concurrent_jobs() <= speccheck.MAX_CONFIGURATIONS
    if spec.kind == "hyperband":
        hb = spec.hyperband
        assert plan_configurations(hb.max_resource, hb.eta, hb.brackets) <= speccheck.MAX_CONFIGURATIONS
        assert hb.max_resource * hb.steps_per_unit <= speccheck.MAX_STEPS
    plan = spec.make_hyperband("app_1")
    job = next(iter(plan.jobs.values()))
    values = {**{k: v for k, v in job.config.items() if k != "_"}, "job_id": job.id,
              "app_id": "app_1", "logdir": "tflogs", "max_steps": job.target_steps,
              "num_gpus": 1, "seed": spec.hyperband.seed, "checkpoint_uri": "hdfs:///c"}
    cmd = command.render_command(spec, values)
    template = spec.job_command()
    assert len(cmd) <= len(template) + sum(len(str(v)) + 2 for v in values.values()) * \
        template.count("{")


@fuzz_settings(150)
@given(st.data())
def test_submit_dry_run(data: st.DataObject) -> None:
    content, suffix = data.draw(spec_files(data.draw(st.sampled_from([AM_SPEC, SINGLE_JOB]))))
    with spec_file(content, suffix) as path:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["submit", "--dry-run", path])
        event(f"exit {rc}")
        assert "Traceback" not in err.getvalue()
        if rc == 0:
            check_am_spec(specfile.load_spec(path))
            assert am.parse_spec(json.loads(out.getvalue())) == specfile.load_spec(path)
        else:
            assert rc == 2 and out.getvalue() == ""
            assert err.getvalue().startswith("themis: ")


@fuzz_settings(150)
@given(st.data())
def test_standalone_specs(data: st.DataObject) -> None:
    content, suffix = data.draw(spec_files(STANDALONE))
    with spec_file(content, suffix) as path:
        try:
            spec = standalone.load_app_spec(path)
        except standalone.SpecError as exc:
            event("refused")
            assert "app spec " in str(exc)
            return
        event("accepted")
        assert am.parse_spec(spec.to_dict()) == spec  # the one format round-trips
        assert speccheck._NAME_RE.fullmatch(spec.name)
        hb = spec.hyperband
        assert plan_configurations(hb.max_resource, hb.eta, hb.brackets) <= \
            standalone.MAX_CONFIGURATIONS
        assert 0 < spec.planned_steps() <= standalone.MAX_CONFIGURATIONS * standalone.MAX_STEPS
        import random

        spec.space().sample(random.Random(0))


PIECES = st.sampled_from(["{", "}", "{{", "}}", "a", "b", "{a}", "{b}", "{c}", "!", "r", "s",
                          ":", ">", "9", "9" * 12, ".", "[", "]", "0", "__init__", " ",
                          "{a!r}", "{a:>5}", "{a.b}", "{a[0]}", "{}", "{0}", "\n"])


@fuzz_settings(150)
@given(st.lists(PIECES | HOSTILE_TEXT, max_size=12).map("".join),
       st.dictionaries(st.sampled_from(["a", "b"]), st.text(max_size=5), min_size=2))
def test_templates(text: str, values: dict[str, str]) -> None:
    """The restricted formatter refuses with InputError or renders exactly what
    str.format renders for plain {name} placeholders."""
    try:
        t = Template(text, {"a", "b"}, "job.command")
    except InputError as exc:
        event("refused")
        assert exc.where == "job.command"
        return
    event("accepted")
    fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    assert set(fields) <= {"a", "b"}
    assert t.render(values) == text.format(**values)
