"""Where the jar lookups look: $THEMIS_*_JAR, then the installed package's copy, then a
source checkout's target/ (tests/integration/test_wheel.py checks a real installed wheel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from themis.client.cluster import ClientError, find_am_jar
from themis.hadoop import jars as jarmod
from themis.hadoop.jars import PluginJarNotFound, find_plugin_jar


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A fake installed package (``pkg``) and a fake checkout (``repo``), no env vars."""
    pkg, repo = tmp_path / "site" / "themis", tmp_path / "repo"
    pkg.mkdir(parents=True)
    repo.mkdir()
    monkeypatch.setattr(jarmod, "_PACKAGE", pkg)
    monkeypatch.setattr(jarmod, "_CHECKOUT", repo)
    monkeypatch.delenv("THEMIS_RM_PLUGIN_JAR", raising=False)
    monkeypatch.delenv("THEMIS_AM_JAR", raising=False)
    return pkg, repo


def _jar(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PK")
    return path


def test_packaged_copy_wins_over_the_checkout(layout: tuple[Path, Path]) -> None:
    pkg, repo = layout
    _jar(repo / "rm-plugin/target/themis-rm-plugin-0.1.0.jar")
    _jar(repo / "submarine-am/target/themis-submarine-am-0.1.0.jar")
    shipped = _jar(pkg / "yarn/lib/themis-rm-plugin-0.1.0.jar")
    shipped_am = _jar(pkg / "submarine_am/lib/themis-submarine-am-0.1.0.jar")
    assert find_plugin_jar() == shipped
    assert find_am_jar() == shipped_am


def test_checkout_target_is_the_fallback_and_skips_unshaded(layout: tuple[Path, Path]) -> None:
    _, repo = layout
    _jar(repo / "rm-plugin/target/original-themis-rm-plugin-0.1.0.jar")
    main = _jar(repo / "rm-plugin/target/themis-rm-plugin-0.1.0.jar")
    assert find_plugin_jar() == main


def test_env_var_wins(layout: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    pkg, _ = layout
    _jar(pkg / "submarine_am/lib/themis-submarine-am-0.1.0.jar")
    mine = _jar(pkg.parent / "mine.jar")
    monkeypatch.setenv("THEMIS_AM_JAR", str(mine))
    assert find_am_jar() == mine


def test_nothing_found_names_both_places_and_the_build(layout: tuple[Path, Path]) -> None:
    pkg, repo = layout
    with pytest.raises(PluginJarNotFound) as e:
        find_plugin_jar()
    msg = str(e.value)
    assert str(pkg / "yarn/lib") in msg and str(repo / "rm-plugin/target") in msg
    assert "mvn -B -ntp -q package -DskipTests" in msg and "THEMIS_RM_PLUGIN_JAR" in msg
    with pytest.raises(ClientError, match="AM jar not found.*submarine-am/target"):
        find_am_jar()
