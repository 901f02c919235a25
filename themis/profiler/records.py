"""Incremental TFRecord reading (the container format of TensorFlow event files).

A record is ``uint64 length | uint32 masked_crc32c(length) | data | uint32
masked_crc32c(data)``, little-endian. :class:`RecordTail` remembers how far it has read
a file and returns only complete records: a record whose bytes are not all written yet
is left for the next call, so a file can be read while TensorFlow is appending to it.
"""

from __future__ import annotations

import struct
from pathlib import Path

_HEADER = 12
_FOOTER = 4


class RecordError(ValueError):
    """An event file is corrupt (names the file, the offset and the check that failed)."""


def _make_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _make_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class RecordTail:
    """Reads the complete records appended to ``path`` since the previous call."""

    def __init__(self, path: Path, verify_data_crc: bool = True) -> None:
        self.path = Path(path)
        self.offset = 0
        self.verify_data_crc = verify_data_crc
        self.error: RecordError | None = None

    def read_new(self) -> list[bytes]:
        """Complete records after :attr:`offset`; advances the offset past them.

        On a checksum mismatch, returns the good records before it, records the problem
        in :attr:`error` and reads nothing more from this file."""
        if self.error is not None:
            return []
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                buf = f.read()
        except FileNotFoundError:
            return []
        records: list[bytes] = []
        pos = 0
        while len(buf) - pos >= _HEADER:
            header = buf[pos : pos + 8]
            (length,) = struct.unpack("<Q", header)
            (length_crc,) = struct.unpack("<I", buf[pos + 8 : pos + 12])
            if masked_crc32c(header) != length_crc:
                self.error = RecordError(
                    f"{self.path}: bad length checksum at offset {self.offset + pos}"
                )
                break
            end = pos + _HEADER + length + _FOOTER
            if end > len(buf):
                break  # the writer has not finished this record yet
            data = buf[pos + _HEADER : pos + _HEADER + length]
            if self.verify_data_crc:
                (data_crc,) = struct.unpack("<I", buf[end - _FOOTER : end])
                if masked_crc32c(data) != data_crc:
                    self.error = RecordError(
                        f"{self.path}: bad data checksum at offset {self.offset + pos}"
                    )
                    break
            records.append(data)
            pos = end
        self.offset += pos
        return records
