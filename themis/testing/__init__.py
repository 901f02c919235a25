"""Test suites shipped with the package for implementations of its interfaces
(:mod:`.am_conformance`: the app-master launchers)."""
