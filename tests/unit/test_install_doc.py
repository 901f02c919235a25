"""docs/install.md names only keys the plugin reads, with the plugin's defaults: every
``yarn.resourcemanager.themis.*`` key in the guide is a constant of ThemisSettings.java, and
each row of its key table states the default ThemisSettings applies."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "install.md"
SETTINGS = ROOT / "rm-plugin" / "src" / "main" / "java" / "org" / "themis" / "yarn" / \
    "ThemisSettings.java"
GENERATED = SETTINGS.with_name("EngineDefaults.java")
PREFIX = "yarn.resourcemanager.themis."


def java_defaults() -> dict[str, str]:
    """key -> default, as ThemisSettings reads them (readDouble/readLong/readNonEmpty with
    a literal default, or conf.getTrimmed(KEY, "default"))."""
    src = SETTINGS.read_text(encoding="utf-8")
    # the defaults shared with the engine are constants of the generated EngineDefaults.java
    shared = dict(re.findall(r"static final \w+ (\w+) = ([^;\n]+);",
                             GENERATED.read_text(encoding="utf-8")))
    src = re.sub(r"EngineDefaults\.(\w+)", lambda m: shared.get(m[1], m[0]), src)
    consts = dict(re.findall(r'String (\w+) = PREFIX \+ "([\w.-]+)";', src))
    # a key read in its per-RM form (String k = perRm(conf, KEY)) counts as KEY
    alias = dict(re.findall(r"String (\w+) = perRm\(conf, (\w+)\);", src))
    consts.update({var: consts[key] for var, key in alias.items()})
    src = re.sub(r"perRm\(conf, (\w+)\)", r"\1", src)
    out: dict[str, str] = {}

    def key_of_field(m: re.Match[str]) -> str:  # leaseDurationMs -> lease-duration-ms
        return consts.get(re.sub(r"(?<!^)(?=[A-Z])", "_", m[0]).upper(), m[0])

    for const, raw in re.findall(r"read(?:Double|Long|NonEmpty)\(conf, (\w+), ([^,)]+)", src):
        # a default computed from another setting names that setting's key
        value = re.sub(r"\b[a-z]+(?:[A-Z][a-z]*)+\b", key_of_field, raw.strip())
        out[PREFIX + consts[const]] = value.strip('"').rstrip("L").replace("_", "")
    for const, raw in re.findall(r'conf\.getTrimmed\((\w+), "([^"]*)"\)', src):
        if const not in consts:  # a YARN key (yarn.resourcemanager.bind-host, ...)
            continue
        out.setdefault(PREFIX + consts[const], raw)
    assert len(consts) >= 20 and set(out) == {PREFIX + k for k in consts.values()}, \
        sorted(set(PREFIX + k for k in consts.values()) - set(out))
    return out


def test_every_key_in_the_guide_exists_with_its_default() -> None:
    defaults = java_defaults()
    text = GUIDE.read_text(encoding="utf-8")
    named = set(re.findall(r"yarn\.resourcemanager\.themis\.[a-z][\w.-]*[a-z]", text))
    unknown = named - set(defaults)
    assert not unknown, f"docs/install.md names keys the plugin does not read: {unknown}"
    rows = re.findall(r"^\| `(yarn\.resourcemanager\.themis\.[\w.-]+)` \| ([^|]+) \|", text,
                      re.M)
    assert len(rows) >= 10, rows
    for key, cell in rows:
        stated = cell.strip().strip("`")
        want = defaults[key]
        assert stated == (want or "empty"), f"{key}: the guide says {stated!r}, " \
                                            f"ThemisSettings {want!r}"
