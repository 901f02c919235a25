"""Themis on YARN: finish-time-fair GPU scheduling (Mahajan et al., NSDI 2020)."""

__version__ = "0.1.0"
