"""A job container's command survives YARN's launch script: YARN's NodeManager writes
``exec /bin/bash -c "<command>"`` into ``launch_container.sh`` (ContainerLaunch's
ShellScriptBuilder), so double quotes, ``$`` and backquotes of a user's job command would be
taken by that shell. The AM passes the job command to the runner in base64; here the exact
string the AM builds runs inside such a script and the job sees its command verbatim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from themis.am.launchers.yarn.commands import container_command
from themis.am.launchers.yarn.runner import decode_command, encode_command, main

# quotes of both kinds, $, backquotes, parentheses, a backslash, a newline, non-ASCII
NASTY = ("echo \"double 'single'\" '$HOME' \"$((1+2))\" `echo back` \\\\ \"(a)\" && "
         "printf '%s\\n' \"é ü\" && echo 'two\nlines'")


ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}


def _launch_script(tmp: Path, command: str) -> Path:
    log_dir = tmp / "logs"
    log_dir.mkdir()
    script = tmp / "launch_container.sh"
    body = command.replace("<LOG_DIR>", str(log_dir))
    script.write_text(f'#!/bin/bash\nexec /bin/bash -c "{body}"\n')
    return script


def test_a_job_command_with_quotes_runs_verbatim_in_yarns_launch_script(tmp_path: Path) -> None:
    expected = subprocess.run(["bash", "-c", NASTY], capture_output=True, text=True, check=True)
    cmd = container_command(sys.executable, "http://127.0.0.1:9", "job-1", 0, "", 0.2, NASTY)
    script = _launch_script(tmp_path, cmd)
    r = subprocess.run(["bash", str(script)], cwd=tmp_path, env=ENV, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr, (tmp_path / "logs" / "stderr").read_text())
    out = (tmp_path / "logs" / "stdout").read_text()
    assert out == expected.stdout, out
    assert "double 'single'" in out and "$HOME" in out and "3" in out and "back" in out


def test_the_old_way_breaks_in_the_launch_script(tmp_path: Path) -> None:
    """The same command passed as `bash -c <shell-quoted>` does not survive (why base64)."""
    import shlex

    cmd = (f"{sys.executable} -m themis.am.launchers.yarn.runner --am http://127.0.0.1:9 "
           f"--job-id j --report-every 0.2 -- bash -c {shlex.quote(NASTY)} "
           "1><LOG_DIR>/stdout 2><LOG_DIR>/stderr")
    script = _launch_script(tmp_path, cmd)
    r = subprocess.run(["bash", str(script)], cwd=tmp_path, env=ENV, capture_output=True,
                       text=True, timeout=60)
    expected = subprocess.run(["bash", "-c", NASTY], capture_output=True, text=True).stdout
    out = (tmp_path / "logs" / "stdout").read_text() if (tmp_path / "logs" / "stdout").exists() \
        else ""
    assert r.returncode != 0 or out != expected


def test_encoding_round_trips_and_is_launch_script_safe() -> None:
    import argparse

    enc = encode_command(NASTY)
    assert set(enc) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=")
    assert decode_command(enc, argparse.ArgumentParser()) == NASTY


def test_bad_base64_and_both_forms_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--am", "http://x", "--job-id", "j", "--command-b64", "%%%"],
                 ["--am", "http://x", "--job-id", "j", "--command-b64", encode_command("true"),
                  "--", "true"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--command-b64 '%%%'" in err and "not both" in err
