"""``themis preview``: replay a cluster's own YARN history under its current policy and
under Themis, in the simulator, before switching to Themis (docs/preview.md).

Modules: :mod:`.history` reads the RM's apps response, :mod:`.trace` turns it into a
simulator workload (what is read and what is inferred), :mod:`.cluster` the topology and
the current policy, :mod:`.rm` the RM's REST API, :mod:`.replay` runs the simulator,
:mod:`.report` writes report.html, summary.json and apps.json, :mod:`.cli` the command.
"""
