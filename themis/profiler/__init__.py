"""themis.profiler"""
