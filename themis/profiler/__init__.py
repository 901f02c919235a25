"""TensorFlow event-log profiler: iteration times, losses, placement slowdowns."""

from themis.profiler.events import LogDirTail, ScalarPoint
from themis.profiler.profiler import JobProfile, Profiler, ProfilerError
from themis.profiler.slowdown import IterSample, estimate_slowdowns, placement_profile

__all__ = [
    "IterSample",
    "JobProfile",
    "LogDirTail",
    "Profiler",
    "ProfilerError",
    "ScalarPoint",
    "estimate_slowdowns",
    "placement_profile",
]
