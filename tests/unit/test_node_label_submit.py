"""An app's node label (the spec's ``node_label``, ``themis job run --node_label``):
parsed and checked in the spec, and refused at submit, before anything is staged, when the
cluster lacks the label or the app's queue may not use it (themis/client/labels.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from themis.am.spec import parse_spec
from themis.am.speccheck import SpecError
from themis.client.cluster import ClientError, Cluster
from themis.client.labels import (
    cluster_labels,
    label_refusal,
    queue_default_label,
    queue_labels,
)

BASE = {"name": "p", "max_steps": 10, "kind": "single-job",
        "job": {"command": "run {max_steps} {checkpoint_uri}"}}

#: GET /ws/v1/cluster/scheduler of a CapacityScheduler with root.a (may use gpu),
#: root.b (no label: accessible-node-labels " "; Hadoop 3.5 leaves the field out, as for
#: root.e) and root.c.d (any label), as Hadoop 3 shapes it
SCHEDULER = {"scheduler": {"schedulerInfo": {
    "type": "capacityScheduler", "queueName": "root", "nodeLabels": ["*"],
    "queues": {"queue": [
        {"queueName": "a", "queuePath": "root.a", "nodeLabels": ["gpu"],
         "defaultNodeLabelExpression": "gpu", "type": "capacitySchedulerLeafQueueInfo"},
        {"queueName": "b", "queuePath": "root.b", "type": "capacitySchedulerLeafQueueInfo"},
        {"queueName": "e", "queuePath": "root.e", "type": "capacitySchedulerLeafQueueInfo"},
        {"queueName": "c", "queuePath": "root.c", "nodeLabels": ["*"],
         "queues": {"queue": {"queueName": "d", "queuePath": "root.c.d",
                              "nodeLabels": "*"}}},
    ]}}}}
LABELS = {"nodeLabelInfo": [{"name": "gpu", "exclusivity": True},
                            {"name": "fast", "exclusivity": False}]}


def test_spec_takes_a_node_label_and_keeps_it() -> None:
    spec = parse_spec({**BASE, "node_label": "gpu-a100_1"})
    assert spec.node_label == "gpu-a100_1"
    assert parse_spec(spec.to_dict()) == spec
    assert parse_spec(BASE).node_label == "" and "node_label" not in parse_spec(BASE).to_dict()


@pytest.mark.parametrize("bad", ["", "gpu,fast", "-gpu", "gpu x", "g" * 256, 3])
def test_a_malformed_node_label_is_refused_naming_the_field(bad: Any) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, "node_label": bad})
    assert "node_label" in str(info.value)


def test_what_the_rm_publishes_is_read() -> None:
    assert cluster_labels(LABELS) == {"gpu", "fast"}
    assert cluster_labels({"nodeLabelInfo": {"name": "gpu"}}) == {"gpu"}
    assert cluster_labels({"nodeLabels": ["gpu"]}) == {"gpu"}
    assert cluster_labels({"nodeLabelInfo": []}) == set()
    assert cluster_labels(None) is None and cluster_labels({"other": 1}) is None
    assert queue_labels(SCHEDULER, "a") == {"gpu"}
    assert queue_labels(SCHEDULER, "root.a") == {"gpu"}
    assert queue_labels(SCHEDULER, "d") == {"*"}
    assert queue_labels(SCHEDULER, "b") == set() and queue_labels(SCHEDULER, "e") == set()
    # an RM that writes the field for no queue tells nothing: not checked
    bare = {"scheduler": {"schedulerInfo": {"type": "capacityScheduler", "queues": {
        "queue": [{"queueName": "b", "type": "capacitySchedulerLeafQueueInfo"}]}}}}
    assert queue_labels(bare, "b") is None
    assert queue_labels(SCHEDULER, "c") is None  # a parent queue takes no apps
    assert queue_labels({"scheduler": {"schedulerInfo": {"type": "fairScheduler"}}}, "a") \
        is None


def test_refusals_say_what_to_change() -> None:
    assert label_refusal("gpu", "a", {"gpu"}, {"gpu"}) == ""
    assert label_refusal("gpu", "d", {"gpu"}, {"*"}) == ""
    assert label_refusal("gpu", "b", None, None) == ""  # the RM said nothing: YARN decides
    assert label_refusal("", "b", {"gpu"}, set()) == ""
    why = label_refusal("gpus", "a", {"gpu", "fast"}, {"gpu"})
    assert "no such node label" in why and "fast, gpu" in why
    why = label_refusal("gpu", "b", {"gpu"}, set())
    assert "queue 'b' may not use it" in why and "accessible-node-labels: none" in why


class FakeRm(Cluster):
    """A Cluster whose RM calls answer from dicts (what a real RM returns) and are logged."""

    def __init__(self, answers: dict[str, Any]) -> None:
        super().__init__("http://rm.invalid:8088", "http://nn.invalid:9870", "alice")
        self.answers = answers
        self.calls: list[str] = []

    def _req(self, method: str, path: str, body: Any = None, timeout: float = 15.0) -> Any:
        self.calls.append(f"{method} {path}")
        if path not in self.answers:
            raise ClientError(f"{method} {path}: HTTP 404")
        return self.answers[path]

    def rm_conf(self) -> dict[str, str]:
        return {}

    def whoami(self) -> str:
        return self.user


@pytest.mark.parametrize("queue, label, why", [
    ("b", "gpu", "queue 'b' may not use it"),
    ("a", "gpus", "no such node label"),
])
def test_submit_is_refused_before_anything_is_staged(tmp_path: Path, queue: str, label: str,
                                                     why: str) -> None:
    rm = FakeRm({"/ws/v1/cluster/get-node-labels": LABELS,
                 "/ws/v1/cluster/scheduler": SCHEDULER})
    spec = parse_spec({**BASE, "queue": queue, "node_label": label})
    with pytest.raises(ClientError) as info:
        rm.submit(spec, tmp_path / "am.jar")
    assert why in str(info.value)
    assert not any("new-application" in c for c in rm.calls)


def test_a_label_the_rm_does_not_describe_goes_to_yarn(tmp_path: Path) -> None:
    rm = FakeRm({})  # neither endpoint: YARN's own check at submission applies
    assert rm.node_label_for("gpu", "a") == "gpu"
    assert rm.calls == ["GET /ws/v1/cluster/scheduler", "GET /ws/v1/cluster/get-node-labels"]


def test_without_a_label_the_queues_default_is_named() -> None:
    """YARN applies a queue's default label to no ask of an app submitted through REST
    (Hadoop 3.5): the client names it (seen on the labeled mini-cluster)."""
    assert queue_default_label(SCHEDULER, "a") == "gpu"
    assert queue_default_label(SCHEDULER, "root.a") == "gpu"
    assert queue_default_label(SCHEDULER, "b") == "" and queue_default_label(None, "a") == ""
    rm = FakeRm({"/ws/v1/cluster/scheduler": SCHEDULER})
    assert rm.node_label_for("", "a") == "gpu" and rm.node_label_for("", "b") == ""
    assert FakeRm({}).node_label_for("", "a") == ""
