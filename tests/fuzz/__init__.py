"""Fuzzing harness for the untrusted-input surfaces (issue 22): the auction JSON of
``themis auction``, the app spec parsers (``themis submit --dry-run``, standalone specs,
command templates), the arbiter's gRPC messages, the simulator's traces (philly-gavel
``.trace`` files, throughputs, converted workloads) and the yarn-site settings the RM
plugin passes to the engine process.

Hypothesis generates malformed and adversarial inputs - byte-level mutations of valid
documents, valid documents with fields replaced by hostile values (huge integers, NaN,
control characters, deep nesting, YAML anchors, aliases and tags), raw bytes - and checks:

* no exception but the documented error (exit status 2 with one line, ``SpecError``,
  the documented gRPC status codes - never INTERNAL/UNKNOWN, never a traceback);
* each input within a time bound (hypothesis ``deadline``, 10 s: the issue's hang bound);
* accepted inputs give valid outputs (a feasible allocation, a spec that round-trips and
  renders, a recorded bid table that passes the auction's validator).

The normal suite runs a bounded number of examples (derandomized, < 60 s in all). The
long run::

    THEMIS_FUZZ_EXAMPLES=10000 nice python3 -m pytest tests/fuzz -p no:cacheprovider \\
        --hypothesis-show-statistics

runs that many examples per test (each surface has two or more tests), with a fresh
random seed (hypothesis prints the seed and the shrunk input of any failure).
"""
