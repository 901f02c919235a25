"""What the YARN AM runs and where it connects: a job container's command line (the runner
around the job command) and the agents' endpoint from the cluster's configuration."""

from __future__ import annotations

import shlex
from collections.abc import Callable

from themis.am.launchers.yarn.runner import CKPT_DIR, encode_command


def default_arbiter(conf: Callable[[str, str], str]) -> str:
    """The agents' endpoint from the cluster's configuration, when the client did not set
    ``THEMIS_ARBITER``: ``agent-address``, else the RM host name and ``agent-port``; with RM
    HA one candidate per RM id, comma-separated as AgentClient takes them
    (:mod:`themis.agent.endpoints`)."""
    from themis.agent import endpoints as ep

    def get(key: str) -> str:
        return str(conf(key, "") or "")

    ha = get(ep.HA_ENABLED_KEY).strip().lower() == "true"
    if (not ha and not get(ep.AGENT_ADDRESS_KEY).strip()
            and get(ep.RM_HOSTNAME_KEY).strip() in ("", "0.0.0.0")):
        raise SystemExit("themis.am.launchers.yarn.am: no THEMIS_ARBITER, no "
                         "yarn.resourcemanager.themis.agent-address and no "
                         "yarn.resourcemanager.hostname: cannot tell where the agents' "
                         "endpoint is")
    return ",".join(ep.agent_addresses(get))




def container_command(python: str, am_url: str, job_id: str, run_id: int, tb_dir: str,
                      report_every_s: float, job_cmd: str, metric: str = "eval_loss",
                      ckpt_store: str = "", task: tuple[str, int] | None = None,
                      fence_after_s: float = 0.0) -> str:
    """A job container's command: the runner, told the job command in base64 (YARN puts the
    command inside double quotes in the container's launch script, so the user's quotes, $
    and backquotes must not reach that shell; the runner runs it with ``bash -c``).
    ``ckpt_store``: the HDFS directory the runner keeps the job's local ``{checkpoint_dir}``
    in (restored before the job starts, saved after it exits). ``task``: a distributed
    job's task (the runner waits for its TF_CONFIG at the AM's rendezvous).
    ``fence_after_s``: a freeze of the job's host this long has the runner kill the job at
    the thaw (:func:`themis.am.launchers.yarn.thaw.fence_after`; 0: never)."""
    store = (f"--checkpoint-dir {CKPT_DIR} --checkpoint-store {shlex.quote(ckpt_store)} "
             if ckpt_store else "")
    if task is not None:
        store += f"--task {task[0]}:{task[1]} "
    return (f"{python} -m themis.am.launchers.yarn.runner --am {shlex.quote(am_url)} "
            f"--job-id {shlex.quote(job_id)} --run-id {run_id} --logdir tflogs "
            f"--tensorboard-dir {shlex.quote(tb_dir)} --report-every {report_every_s} "
            f"--metric {shlex.quote(metric)} --fence-after {fence_after_s:g} {store}"
            f"--command-b64 {encode_command(job_cmd)} 1><LOG_DIR>/stdout 2><LOG_DIR>/stderr")
