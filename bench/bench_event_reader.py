"""Read speed of TensorFlow event files: TensorBoard's reader against a hand-written one.

Both read the same files in the same run, from the first byte to the last, and decode
every scalar:

* ``tensorboard``: :class:`themis.profiler.LogDirTail`, i.e. TensorBoard's
  ``RawEventFileLoader`` on TensorBoard's TensorFlow-free record reader (the profiler's
  reader), plus scalar decoding;
* ``hand-written``: a self-contained TFRecord splitter with a table-driven pure-Python
  CRC32C, plus the same scalar decoding.

Without ``--logdir`` it writes a synthetic event file of ``--mib`` MiB first, made of
records shaped like the training job's (``tf.summary.scalar`` rank-0 float tensors, tags
``loss``/``iteration_time``), with TensorBoard's own record writer. Prints one JSON
object on stdout (MiB/s per reader, records, and whether TensorFlow got imported).

    python bench/bench_event_reader.py [--mib 4] [--repeat 5] [--logdir DIR]
"""

from __future__ import annotations

import argparse
import json
import platform
import struct
import sys
import tempfile
import time
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from themis.profiler.events import EVENT_FILE_GLOB, LogDirTail, scalars_of


def write_synthetic(path: Path, mib: float) -> int:
    """An event file of about ``mib`` MiB of scalar events; returns the record count."""
    meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    n = 0
    with open(path, "wb") as f:
        w = RecordWriter(f)
        w.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
                .SerializeToString())
        step = 0
        while f.tell() < mib * 2**20:
            step += 1
            for tag, value in (("loss", 1.0 / step), ("iteration_time", 0.003)):
                t = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT,
                                           tensor_content=struct.pack("<f", value))
                ev = event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(
                    value=[summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=t)]))
                w.write(ev.SerializeToString())
                n += 1
    return n


# ----------------------------------------------------------------- the hand-written reader
def _table() -> list[int]:
    out = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        out.append(crc)
    return out


_TABLE = _table()


def _masked_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def hand_written_records(path: Path) -> list[bytes]:
    buf = path.read_bytes()
    out, pos = [], 0
    while len(buf) - pos >= 12:
        (length,) = struct.unpack_from("<Q", buf, pos)
        (length_crc,) = struct.unpack_from("<I", buf, pos + 8)
        if _masked_crc32c(buf[pos:pos + 8]) != length_crc:
            raise ValueError(f"{path}: bad length checksum at {pos}")
        end = pos + 12 + length + 4
        if end > len(buf):
            break
        data = buf[pos + 12:pos + 12 + length]
        (data_crc,) = struct.unpack_from("<I", buf, end - 4)
        if _masked_crc32c(data) != data_crc:
            raise ValueError(f"{path}: bad data checksum at {pos}")
        out.append(data)
        pos = end
    return out


# ----------------------------------------------------------------- timing
def time_tensorboard(logdir: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    points = LogDirTail(logdir).poll()
    return time.perf_counter() - t0, len(points)


def time_hand_written(logdir: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = 0
    for path in sorted(logdir.glob(EVENT_FILE_GLOB)):
        for record in hand_written_records(path):
            n += len(scalars_of(event_pb2.Event.FromString(record), path.name))
    return time.perf_counter() - t0, n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=float, default=4.0,
                   help="size of the synthetic event file (default 4; ignored with --logdir)")
    p.add_argument("--repeat", type=int, default=5,
                   help="reads per reader, alternating; the fastest counts (default 5)")
    p.add_argument("--logdir", type=Path, default=None,
                   help="read the event files of this directory instead of a synthetic one")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        logdir = args.logdir or Path(tmp)
        if args.logdir is None:
            write_synthetic(logdir / "events.out.tfevents.0.bench", args.mib)
        size = sum(f.stat().st_size for f in logdir.glob(EVENT_FILE_GLOB))
        if size == 0:
            sys.exit(f"no event files ({EVENT_FILE_GLOB}) in {logdir}")
        result: dict[str, object] = {"bytes": size, "python": platform.python_version(),
                                     "machine": platform.machine()}
        readers = {"tensorboard": time_tensorboard, "hand-written": time_hand_written}
        runs: dict[str, list[tuple[float, int]]] = {name: [] for name in readers}
        for _ in range(max(1, args.repeat)):  # interleaved: both see the same machine load
            for name, fn in readers.items():
                runs[name].append(fn(logdir))
        for name, rs in runs.items():
            best = min(t for t, _ in rs)
            result[name] = {"seconds": round(best, 4), "scalars": rs[0][1],
                            "mib_per_s": round(size / 2**20 / best, 3)}
        result["tensorflow_imported"] = "tensorflow" in sys.modules
    print(json.dumps(result))


if __name__ == "__main__":
    main()
