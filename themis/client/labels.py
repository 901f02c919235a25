"""The check ``themis submit`` and ``themis job run`` make before asking for a node label
(the spec's ``node_label``; docs/yarn.md, "Partitions (node labels)"): the label must exist
in the cluster and the app's queue must be allowed to use it, else the submission is refused
here with one line that says what to change, before anything is staged in HDFS.

YARN refuses such a submission itself, with a message about resource requests and queue
labels that does not say which setting to change; this check reads what the RM publishes
(``GET /ws/v1/cluster/get-node-labels`` and the CapacityScheduler's queues in
``GET /ws/v1/cluster/scheduler``: each queue's ``nodeLabels``, its accessible labels, ``*``
for any, left out for a queue that may use none). Where the RM publishes neither (another
scheduler, an older RM), nothing is checked here and YARN's own refusal is reported.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

ANY_LABEL = "*"


def cluster_labels(doc: Any) -> set[str] | None:
    """The labels of a ``get-node-labels`` body (``nodeLabelInfo``: objects with ``name``;
    older RMs: ``nodeLabels``, names); None when the body is neither."""
    if not isinstance(doc, Mapping):
        return None
    items = doc.get("nodeLabelInfo", doc.get("nodeLabels"))
    if items is None:
        return None
    if isinstance(items, Mapping | str):  # one label: a single object or name
        items = [items]
    if not isinstance(items, list):
        return None
    names = {str(i.get("name", "")) if isinstance(i, Mapping) else str(i) for i in items}
    return {n for n in names if n}


def _queues(q: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield q
    children = (q.get("queues") or {}).get("queue") if isinstance(q.get("queues"), Mapping) \
        else None
    if isinstance(children, Mapping):
        children = [children]
    for c in children or []:
        if isinstance(c, Mapping):
            yield from _queues(c)


def _scheduler(doc: Any) -> Mapping[str, Any] | None:
    """``scheduler.schedulerInfo`` of a ``/ws/v1/cluster/scheduler`` body (None if none)."""
    try:
        root = doc["scheduler"]["schedulerInfo"]
    except (KeyError, TypeError):
        return None
    return root if isinstance(root, Mapping) else None


def _leaf(root: Mapping[str, Any], queue: str) -> Mapping[str, Any] | None:
    """The leaf queue named ``queue`` (a name or a path) under ``root``."""
    return next((q for q in _queues(root) if queue in (q.get("queueName"), q.get("queuePath"))
                 and "queues" not in q), None)


def queue_labels(doc: Any, queue: str) -> set[str] | None:
    """The labels leaf queue ``queue`` (a name or a path) may use, from a
    ``/ws/v1/cluster/scheduler`` body of the CapacityScheduler; None when the body is not
    one or does not list the queue's labels."""
    root = _scheduler(doc)
    if root is None or "capacityScheduler" not in str(root.get("type", "")):
        return None
    leaf = _leaf(root, queue)
    if leaf is None:
        return None
    # the RM leaves ``nodeLabels`` out of a queue that may use no label (only the default
    # partition: accessible-node-labels " "), so its absence means "none" only where the body
    # shows the field on some queue (an RM that never writes it tells nothing)
    written = any("nodeLabels" in q for q in _queues(root))
    labels = leaf.get("nodeLabels", [] if written else None)
    if isinstance(labels, str):
        labels = [labels]
    if not isinstance(labels, list):
        return None
    return {str(x) for x in labels}


def queue_default_label(doc: Any, queue: str) -> str:
    """Leaf queue ``queue``'s ``default-node-label-expression`` from a CapacityScheduler
    ``/ws/v1/cluster/scheduler`` body ("" when it has none or the body does not say).

    A submission through the REST API names the app's label even when it is empty, and YARN
    then applies the queue's default to none of the app's asks (Hadoop 3.5: the app runs in
    the default partition), so the client names the queue's default itself."""
    root = _scheduler(doc)
    leaf = None if root is None else _leaf(root, queue)
    label = None if leaf is None else leaf.get("defaultNodeLabelExpression")
    return label.strip() if isinstance(label, str) else ""


def label_refusal(label: str, queue: str, known: set[str] | None,
                  accessible: set[str] | None) -> str:
    """Why a submission to ``queue`` asking node label ``label`` is refused ("" when it is
    not, or when the RM did not say enough to tell)."""
    if not label:
        return ""
    if known is not None and label not in known:
        listed = ", ".join(sorted(known)) or "none"
        return (f"node_label {label!r}: no such node label in the cluster (its labels: "
                f"{listed}); ask the cluster's admins or leave node_label out")
    if accessible is not None and label not in accessible and ANY_LABEL not in accessible:
        listed = ", ".join(sorted(x for x in accessible if x)) or "none"
        return (f"node_label {label!r}: queue {queue!r} may not use it (its "
                f"accessible-node-labels: {listed}); choose a queue that may, or ask the "
                "cluster's admins")
    return ""
