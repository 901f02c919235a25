"""Scalar summaries from TensorFlow event files, read incrementally as the files grow.

Handles both TF1 ``simple_value`` scalars and TF2 scalars (``tf.summary.scalar``), which
are stored as rank-0 tensors. Decoding uses TensorBoard's protobuf classes and tensor
utilities (no TensorFlow import).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from themis.profiler.records import RecordTail

LOG = logging.getLogger(__name__)

EVENT_FILE_GLOB = "events.out.tfevents.*"


@dataclass(frozen=True, slots=True)
class ScalarPoint:
    tag: str
    step: int
    value: float
    wall_time: float
    source: str  # name of the event file (one per run segment of a job)


def scalars_of(record: bytes, source: str) -> list[ScalarPoint]:
    """The scalar values in one serialized ``Event`` (non-scalar values are ignored)."""
    event = event_pb2.Event.FromString(record)
    if not event.HasField("summary"):
        return []
    points = []
    for v in event.summary.value:
        kind = v.WhichOneof("value")
        if kind == "simple_value":
            value = float(v.simple_value)
        elif kind == "tensor":
            arr = tensor_util.make_ndarray(v.tensor)
            if arr.size != 1 or not np.issubdtype(arr.dtype, np.number):
                continue
            value = float(arr.reshape(()))
        else:
            continue
        points.append(ScalarPoint(v.tag, int(event.step), value, float(event.wall_time), source))
    return points


class LogDirTail:
    """Follows every event file in a log directory (new files are picked up as they
    appear, e.g. when a job is restarted from a checkpoint)."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = Path(logdir)
        self._tails: dict[str, RecordTail] = {}
        self._reported: set[str] = set()

    def poll(self) -> list[ScalarPoint]:
        """Scalars written since the previous call, file by file in name (= creation
        time) order. Corrupt files are logged once and then ignored."""
        points: list[ScalarPoint] = []
        for path in sorted(self.logdir.glob(EVENT_FILE_GLOB)):
            tail = self._tails.setdefault(path.name, RecordTail(path))
            for record in tail.read_new():
                try:
                    points.extend(scalars_of(record, path.name))
                except Exception as e:  # a record that passed its CRC but does not decode
                    LOG.warning("%s: undecodable event record: %s", path, e)
            if tail.error is not None and path.name not in self._reported:
                self._reported.add(path.name)
                LOG.warning("event file corrupt, not reading further: %s", tail.error)
        return points
