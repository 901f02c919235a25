"""bench/proc_cpu.py: CPU seconds by kind of process, for the mini-cluster comparison."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
_spec = importlib.util.spec_from_file_location("_bench_proc_cpu", BENCH / "proc_cpu.py")
assert _spec is not None and _spec.loader is not None
proc_cpu = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = proc_cpu
_spec.loader.exec_module(proc_cpu)


def test_kinds_name_the_module_the_main_class_or_the_command() -> None:
    kind = proc_cpu.kind
    assert kind(["/usr/bin/python3", "-u", "-m", "themis.jobs.train", "--job-id", "x"],
                "python3") == "themis.jobs.train"
    assert kind(["python3", "bench/bench_cluster_compare.py", "--runs", "stock"],
                "python3") == "bench_cluster_compare.py"
    assert kind(["java", "-Xmx1g", "-cp", "/a:/b", "-Dx=y",
                 "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"],
                "java") == "ResourceManager"
    assert kind(["/usr/sbin/dockerd", "--bridge=none"], "dockerd") == "dockerd"
    assert kind([], "kworker/0:1") == "kworker/0:1"


def _proc(root: Path, pid: int, argv: list[str], ticks: int, start: int = 7,
          comm: str = "x y") -> None:
    d = root / str(pid)
    d.mkdir(exist_ok=True)
    # fields after "(comm) ": state is field 3, utime 14, stime 15, starttime 22
    rest = ["S"] + ["0"] * 10 + [str(ticks), str(ticks)] + ["0"] * 6 + [str(start)]
    # as in /proc, a file is read whole or not at all (the sampler reads while we write)
    for name, data in (("cmdline", b"\0".join(a.encode() for a in argv) + b"\0"),
                       ("stat", f"{pid} ({comm}) {' '.join(rest)}\n".encode())):
        (d / f".{name}").write_bytes(data)
        (d / f".{name}").replace(d / name)


def test_sums_cpu_by_kind_counting_only_what_was_used_while_it_ran(tmp_path: Path) -> None:
    tick = proc_cpu.TICKS
    _proc(tmp_path, 10, ["python3", "-m", "themis.jobs.train"], 50 * tick)  # 100 s before
    p = proc_cpu.ProcCpu(period=0.01, proc=tmp_path).start()
    _proc(tmp_path, 10, ["python3", "-m", "themis.jobs.train"], 51 * tick)  # +2 s
    _proc(tmp_path, 11, ["python3", "-m", "themis.jobs.train"], 1 * tick)  # a new one: 2 s
    _proc(tmp_path, 12, ["java", "org.apache.hadoop.yarn.server.nodemanager.NodeManager"],
          3 * tick)
    out = p.stop()
    assert out["themis.jobs.train"] == {"cpu_s": 4.0, "processes": 2}
    assert out["NodeManager"] == {"cpu_s": 6.0, "processes": 1}
    assert list(out)[1] == "NodeManager"  # most CPU first, after the wall time


def test_a_process_that_execs_is_counted_by_what_it_runs_after(tmp_path: Path) -> None:
    tick = proc_cpu.TICKS
    p = proc_cpu.ProcCpu(period=0.01, proc=tmp_path).start()
    # forked by a Python launcher: its command line is the parent's until it execs
    _proc(tmp_path, 20, ["python3", "launcher.py"], 1 * tick, comm="python3")
    time.sleep(0.1)
    _proc(tmp_path, 20, ["java", "org.apache.hadoop.yarn.server.nodemanager.NodeManager"],
          5 * tick, comm="java")
    time.sleep(0.1)
    out = p.stop()
    assert out["NodeManager"] == {"cpu_s": 10.0, "processes": 1}
    assert "launcher.py" not in out
