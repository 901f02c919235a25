"""The RM plugin's generated EngineDefaults.java matches the Python constants it comes from
(themis.yarn.javagen), and ThemisSettings.java takes its shared defaults from it instead of
keeping copies of its own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from themis.mechanism.fairness import (
    DEFAULT_IDEAL_TIME,
    DEFAULT_STARVATION,
    IDEAL_TIME_NAMES,
    STARVATION_NAMES,
)
from themis.mechanism.round import DEFAULT_FAIRNESS_KNOB
from themis.mechanism.solvers import DEFAULT_SOLVER, SERVICE_SOLVERS
from themis.yarn import javagen
from themis.yarn.settings import MAX_APPS, MAX_LEASE_MS, VARIABLES

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / javagen.JAVA_FILE
SETTINGS = COMMITTED.with_name("ThemisSettings.java")


def test_committed_file_is_a_fresh_generation() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == javagen.render(), (
        f"{COMMITTED.relative_to(REPO)} is stale: a Python default or name changed; run "
        "scripts/gen-java-defaults.sh")


def java_constants(source: str) -> dict[str, str]:
    """NAME -> literal text of each ``public static final`` field (lists joined)."""
    out = {}
    for name, literal in re.findall(r"public static final [\w<>]+ (\w+) =\s*([^;]+);", source):
        out[name] = " ".join(literal.split())
    return out


def test_generated_values_are_the_python_ones() -> None:
    c = java_constants(javagen.render())
    assert c["DEFAULT_FAIRNESS_KNOB"] == repr(DEFAULT_FAIRNESS_KNOB)
    assert c["DEFAULT_SOLVER"] == f'"{DEFAULT_SOLVER}"'
    assert re.findall(r'"([^"]+)"', c["SOLVERS"]) == list(SERVICE_SOLVERS)
    assert c["DEFAULT_IDEAL_TIME"] == f'"{DEFAULT_IDEAL_TIME}"'
    assert re.findall(r'"([^"]+)"', c["IDEAL_TIMES"]) == list(IDEAL_TIME_NAMES)
    assert c["DEFAULT_STARVATION"] == f'"{DEFAULT_STARVATION}"' == '"ranked"'
    assert re.findall(r'"([^"]+)"', c["STARVATIONS"]) == list(STARVATION_NAMES)
    assert c["MAX_APPS_LIMIT"] == f"{MAX_APPS}L"
    assert c["MAX_LEASE_DURATION_MS"] == f"{MAX_LEASE_MS}L"
    assert c["DEFAULT_LEASE_DURATION_MS"] == f"{int(VARIABLES['THEMIS_LEASE_MS'][1])}L"
    assert c["DEFAULT_MAX_APPS"] == f"{int(VARIABLES['THEMIS_MAX_APPS'][1])}L"


def test_a_changed_python_default_changes_the_java(monkeypatch: pytest.MonkeyPatch) -> None:
    # what the committed-file test catches: the Python side moved on, the Java file did not
    before = javagen.render()
    monkeypatch.setattr(javagen, "SERVICE_SOLVERS", (*SERVICE_SOLVERS, "cpsat"))
    after = javagen.render()
    assert after != before and '"split:open-fast", "cpsat"' in after


def test_settings_table_and_mechanism_must_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(javagen, "DEFAULT_SOLVER", "highs")
    with pytest.raises(ValueError, match="disagrees"):
        javagen.constants()


def test_only_plain_names_are_written() -> None:
    bad = javagen.Constant("X", 'a"; System.exit(1); "', "doc")
    with pytest.raises(ValueError, match="plain name"):
        javagen.render([bad])


def test_java_lines_fit_the_sources_width() -> None:
    assert all(len(line) <= 100 for line in javagen.render().splitlines())


def test_settings_read_the_shared_defaults_from_the_generated_class() -> None:
    src = SETTINGS.read_text(encoding="utf-8")
    for name in ("DEFAULT_FAIRNESS_KNOB", "DEFAULT_LEASE_DURATION_MS", "DEFAULT_SOLVER",
                 "SOLVERS", "DEFAULT_IDEAL_TIME", "IDEAL_TIMES", "DEFAULT_STARVATION",
                 "STARVATIONS", "DEFAULT_MAX_APPS", "MAX_APPS_LIMIT", "MAX_LEASE_DURATION_MS"):
        assert f"EngineDefaults.{name}" in src, name
    # no hand-kept copy left: the solver names and choices appear in the generated file only
    for literal in (r'"open-fast"', r'"lpbb"', r'"paper"', r'"ranked"', r"\b0\.8\b",
                    r"\b600_?000L"):
        assert not re.search(literal, src), literal


def test_check_mode(tmp_path: Path) -> None:
    stale = tmp_path / "EngineDefaults.java"
    stale.write_text("// old\n", encoding="utf-8")
    run = [sys.executable, "-m", "themis.yarn.javagen"]
    assert subprocess.run([*run, "--check", "--file", str(stale)], cwd=REPO,
                          capture_output=True).returncode == 1
    subprocess.run([*run, "--write", "--file", str(stale)], cwd=REPO, check=True,
                   capture_output=True)
    assert subprocess.run([*run, "--check", "--file", str(stale)], cwd=REPO,
                          capture_output=True).returncode == 0
    printed = subprocess.run(run, cwd=REPO, check=True, capture_output=True, text=True).stdout
    assert printed == stale.read_text(encoding="utf-8") == javagen.render()
