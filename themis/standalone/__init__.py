"""Standalone mode: the arbiter and Hyperband apps with real TensorFlow jobs on one machine
(``themis standalone``, docs/standalone.md)."""

from themis.standalone.cli import add_parser

__all__ = ["add_parser"]
