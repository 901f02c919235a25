"""An application master for standalone mode: Hyperband + profiler + agent + job processes.

One :class:`AppMaster` per app, as a small thread group inside the standalone driver:

* the **agent** (:class:`~themis.agent.client.AgentClient` with a
  :class:`~themis.am.core.LiveBidder`, started by :class:`~themis.am.master.AppMasterBase`)
  registers with the arbiter, bids on offers and reports rho by the cached-table rule;
* the **control loop** (:class:`~themis.am.master.AppMasterBase`, the same loop as the
  YARN AM's; one thread, every ``tick_s`` or when an allocation arrives); what is this
  launcher's: progress comes from the jobs' TensorFlow event files, read by the
  :class:`~themis.profiler.Profiler` (steps, losses, serial iteration times, and the
  profiled placement slowdowns of the app model), and jobs are placed on GPU ids: the
  usable leased GPUs are split among the running jobs and job processes are started and
  stopped accordingly.

Binding rules (see docs/standalone.md):

* a job process is started only on GPUs the app holds under an unexpired lease, and no
  two processes - of any app - ever share a GPU (:class:`GpuRegistry`): a GPU that
  changed hands is used by its new app once the previous job has exited;
* jobs keep their GPUs across rounds when they can (sticky assignment), so a lease that is
  renewed to the same app costs nothing;
* a job whose GPUs are no longer usable (:mod:`themis.am.margins`: no stop lead, a grace
  of ``grace_s``) gets SIGTERM (it checkpoints and exits): as soon as an allocation shows
  the lease was not renewed, or ``grace_s`` after the lease expired if no allocation comes
  (arbiter gone); so does a run past its step target (docs/jobs.md, "Step target");
* a job still running ``kill_after_s`` after its SIGTERM, whatever the stop, gets SIGKILL
  (:meth:`AppMaster._kill_unstopped`, during the search and after it);
* a stopped job resumes from its newest checkpoint when the app has GPUs for it again;
* no process is started on a GPU that is not placeable (a lease with less than
  ``min_lease_left_s``, the margins' start margin, to run: the job would spend it loading
  TensorFlow): the start waits for the expiry round instead.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from themis.am.command import contract_env, render_command
from themis.am.core import LaunchCode, LaunchEvent
from themis.am.hyperband import JobStatus, RungOutcome
from themis.am.launchers.local.jobs import GpuRegistry, GpusBusy, JobRunner, LocalProcessLauncher
from themis.am.launchers.local.spec import AppSpec
from themis.am.margins import STOP_GRACE_S, LeaseMargins, PastTarget
from themis.am.master import AppMasterBase
from themis.am.packing import JobNeed, split
from themis.mechanism.bidder import AllocationInfo
from themis.mechanism.placement import DEFAULT
from themis.mechanism.topology import Gpu, Locality, locality_of
from themis.profiler import Profiler

log = logging.getLogger(__name__)

__all__ = ["AppMaster", "GpuRegistry", "Sample"]

#: The "hardware" of the emulated GPUs: how much slower a step runs per locality level.
TRUE_SLOWDOWN = DEFAULT


@dataclass
class Sample:
    t: float  # seconds since the driver started
    rho: float | None  # live rho (agent code, current model, GPUs held)
    rho_reported: float | None  # last rho the agent reported to the arbiter
    gpus: int
    running: int


class AppMaster(AppMasterBase):
    launcher: LocalProcessLauncher

    def __init__(
        self,
        spec: AppSpec,
        address: str,
        out_dir: Path,
        topology: Mapping[str, Gpu],
        *,
        t0: float,
        grace_s: float = 3.0,
        tick_s: float = 0.5,
        report_s: float = 2.0,
        min_lease_left_s: float = 0.0,
        kill_after_s: float = STOP_GRACE_S,
        registry: GpuRegistry | None = None,
        emit: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
        registration_token: str = "",
    ) -> None:
        super().__init__(spec, spec.name, clock, max(spec.step_time_ms, 1.0) / 1000.0,
                         margins=LeaseMargins(start_margin_s=min_lease_left_s, grace_s=grace_s),
                         report_s=report_s)
        self.registration_token = registration_token  # from the driver (arbiter.registration)
        self.name = spec.name
        self.address = address
        self.root = out_dir / "apps" / spec.name
        self.topology = topology
        self.t0 = t0
        self.tick_s = tick_s
        self.kill_after_s = kill_after_s
        self._past_targets: dict[str, PastTarget] = {}  # job -> since when past its target
        self.registry = registry or GpuRegistry()
        self.emit = emit or (lambda msg: None)
        self.state = "waiting"  # waiting -> running -> done | failed | stopped
        self.error = ""
        self.planned_steps = spec.planned_steps()
        self.profiler = Profiler(metric=spec.objective.metric)
        self.launcher = LocalProcessLauncher(spec.name, topology, self.registry,
                                             self._make_runner, TRUE_SLOWDOWN)
        self.start_time = 0.0  # unix time of submission
        self.samples: list[Sample] = []
        self.held_changes: list[tuple[float, list[str]]] = []
        self.max_tick_s = 0.0
        self._last_sample = -math.inf
        self._held: list[str] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._snapshot: dict[str, Any] = {"name": self.name, "state": self.state}
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name=f"am-{self.name}", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        delay = self.t0 + self.spec.submit_at_s - self.clock()
        if delay > 0 and self._stop.wait(delay):
            return
        try:
            self._submit()
            while not self._stop.is_set() and self.state == "running":
                t = time.monotonic()
                self.tick()
                took = time.monotonic() - t
                self.max_tick_s = max(self.max_tick_s, took)
                if took > 1.0:
                    log.warning("app %s: control loop tick took %.1fs", self.name, took)
                self._wake.wait(self.tick_s)
                self._wake.clear()
        except Exception as exc:  # keep the driver alive; report the app as failed
            log.exception("app %s: application master failed", self.name)
            self.state, self.error = "failed", f"{type(exc).__name__}: {exc}"
            self.emit(f"{self.name}: FAILED: {self.error}")
            self._update_snapshot(self.clock())

    def _submit(self) -> None:
        self.start_time = self.clock()
        self.root.mkdir(parents=True, exist_ok=True)
        self._sync_jobs()
        self.start_agent(self.address, seed=zlib.crc32(self.name.encode()),
                         registration_token=self.registration_token)
        self.state = "running"
        self.emit(f"{self.name}: submitted ({len(self.hb.current_jobs())} configurations "
                  f"in rung 0, {self.planned_steps} steps planned)")

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop the loop, SIGTERM every job (they checkpoint), wait, then unregister."""
        self.begin_shutdown()
        self.finish_shutdown(timeout)

    def begin_shutdown(self) -> None:
        """Stop the control loop and send SIGTERM to every live job."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for r in self.runners.values():
            r.stop("shutdown")

    def finish_shutdown(self, timeout: float = 30.0) -> None:
        """Wait for the jobs to checkpoint and exit (SIGKILL after ``timeout``), then
        unregister from the arbiter."""
        end = time.monotonic() + timeout
        while self.launcher.live() and time.monotonic() < end:
            self._poll_launcher()
            time.sleep(0.1)
        for r in self.runners.values():
            if r.live:
                log.warning("job %s did not exit %.0fs after SIGTERM: SIGKILL", r.job_id, timeout)
                r.kill()
                if r.proc is not None:
                    r.proc.wait(5)
        self._poll_launcher()
        self.finish(self.clock(), "killed")  # unregisters: gives every lease back
        self._update_snapshot(self.clock())

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed")

    # ------------------------------------------------------------------ agent callbacks
    def on_allocation(self, alloc: AllocationInfo) -> None:
        if alloc.gpus:
            via = "/".join(sorted(set(alloc.vias)))
            self.emit(f"{self.name}: round {alloc.round_id}: +{len(alloc.gpus)} GPU "
                      f"({via}) {','.join(g.id for g in alloc.gpus)}")
        self._wake.set()

    @property
    def allocations(self) -> list[dict[str, Any]]:
        """The allocations that granted GPUs, as report.json shows them (times in seconds
        since the driver started)."""
        return [{"t": round(r["time"] - self.t0, 3), "round": r["round"], "gpus": r["gpus"],
                 "via": sorted(set(r["vias"])), "expiry": round(r["expiry"] - self.t0, 3),
                 "bidder": r["was_bidder"], "kept_fraction": r["kept_fraction"]}
                for r in list(self.rounds) if r["gpus"]]

    # ------------------------------------------------------------------ control loop
    @property
    def runners(self) -> dict[str, JobRunner]:
        return self.launcher.runners

    def _make_runner(self, job_id: str) -> JobRunner:
        job = self.hb.jobs[job_id]
        runner = JobRunner(job_id, dict(job.config), dict(self.spec.args),
                           self.root / "jobs" / job_id, self.spec.step_time_ms,
                           render=self._renderer(job_id),
                           ps_render=self._renderer(job_id, "ps") if self.spec.ps.count else None,
                           env={**contract_env({"app_id": self.name, "seed": self.spec.seed}),
                                **self.spec.env})
        runner.logdir.mkdir(parents=True, exist_ok=True)
        self.profiler.add_job(job_id, runner.logdir)
        return runner

    def _sync_jobs(self) -> None:
        for job_id in self.hb.jobs:
            self.launcher.runner(job_id)

    def _renderer(self, job_id: str, task: str = "worker"
                  ) -> Callable[[int, int], str] | None:
        """``job.command`` rendered for this machine, given a segment's step target and
        GPU count (None for the bundled job: JobRunner builds its command line with the
        emulated GPU speed)."""
        if not self.spec.command:
            return None
        jobs = self.root / "jobs" / job_id
        fixed = self.core.placeholders(job_id, logdir=jobs / "logs",
                                       checkpoint_uri=jobs / "checkpoints",
                                       checkpoint_dir=jobs / "checkpoints")
        return lambda steps, gpus: render_command(
            self.spec, {**fixed, "max_steps": steps, "num_gpus": gpus}, task)

    def _poll_launcher(self) -> None:
        self.poll_launcher()
        self._sync_jobs()

    # ------------------------------------------------------------------ loop hooks
    def on_event(self, ev: LaunchEvent) -> None:
        """A run started or ended: the display line and the job's last value."""
        seg = next((sg for j, sg in self.launcher.closed if j == ev.job_id), None)
        where = ",".join(seg.gpus) if seg else ""
        if ev.code is LaunchCode.REACHED:
            self.emit(f"{self.name}: {ev.job_id} reached step {ev.step} on {where}")
        elif ev.code is LaunchCode.STOPPED and seg is not None:
            at = (f"at step {ev.step}, checkpoint kept" if ev.step is not None
                  else "before its first step")
            self.emit(f"{self.name}: {ev.job_id} stopped ({seg.stopped_by}) {at} on {where}")
        job = self.hb.jobs[ev.job_id]
        if ev.code is not LaunchCode.STARTED and job.status is JobStatus.RUNNING:
            # the run has ended: its last values (Keras' last epoch), read before the core
            # counts its steps in full (AmCore.apply)
            self.profiler.poll()
            prof = self.profiler.jobs.get(ev.job_id)
            steps = max(ev.step or 0, prof.steps_done if prof else 0)
            self._report(ev.job_id, steps, prof.objective_value() if prof else None)

    def note(self, line: str) -> None:
        self.emit(f"{self.name}: {line}")

    def _report(self, job_id: str, steps: int, loss: float | None) -> None:
        prof = self.profiler.jobs.get(job_id)
        it = prof.serial_iter_time(self.profile) if prof else None
        source = prof.objective_source() if prof else None
        self.core.progress(job_id, steps, loss, it, source=source,
                           tags=sorted(prof.tags_seen) if prof and not source else ())
        self._sync_jobs()

    def _on_outcome(self, outcome: RungOutcome) -> None:
        if outcome.promoted or outcome.stopped:
            self.emit(f"{self.name}: rung {outcome.rung} done: promoted "
                      f"{', '.join(outcome.promoted) or '-'}; stopped "
                      f"{', '.join(outcome.stopped) or '-'}")
        if outcome.finished:
            self.emit(f"{self.name}: bracket done: {', '.join(outcome.finished)}")

    def collect_progress(self) -> None:
        """Steps, losses and iteration times from the jobs' event files -> Hyperband; the
        profiled placement slowdowns -> the app model."""
        self._sync_jobs()  # runners for the trials of new rungs
        new = self.profiler.poll()
        self.profile = self.profiler.placement_profile()
        for job_id in new:
            job = self.hb.jobs[job_id]
            if job.status is JobStatus.RUNNING:
                prof = self.profiler.job(job_id)
                self._report(job_id, prof.steps_done, prof.objective_value())

    def account(self, now: float, held: list[str], dt: float) -> None:
        if sorted(held) != self._held and not self.ended:
            self._held = sorted(held)
            self.held_changes.append((round(now - self.t0, 3), list(self._held)))

    def held_locality(self, held: list[str]) -> Locality:
        return locality_of([self.topology[g] for g in held if g in self.topology])

    def place(self, now: float, usable: dict[str, float], placeable: dict[str, float]) -> None:
        """Jobs on GPU ids: the usable GPUs split among the running jobs (sticky), jobs
        that lost their GPUs or were moved stopped, the others started on placeable GPUs."""
        keep = set(usable)
        desired = self._assign(sorted(keep))
        for r in self.runners.values():  # stop jobs that lost their GPUs or were moved
            if not r.live or r.stop_sent is not None:
                continue
            moved = set(desired[r.job_id]) != set(r.gpus) if r.job_id in desired \
                else self.hb.jobs[r.job_id].status is JobStatus.RUNNING
            if not set(r.gpus) <= keep:
                self.launcher.stop(r.job_id, "lease")
            elif moved:
                self.launcher.stop(r.job_id, "reassign")
            elif self._past_target(r, now):
                self.launcher.stop(r.job_id, "max-steps")
        self._kill_unstopped(now)
        runnable = {j.id for j in self.core.runnable()}
        live = self.launcher.live()  # (a distributed job's: until all of its tasks ended)
        for job_id, gpus in sorted(desired.items()):
            if job_id in live or not gpus or not set(gpus) <= set(placeable) \
                    or job_id not in runnable:
                continue  # (not placeable: TF would barely start before the expiry round)
            job = self.hb.jobs[job_id]
            try:
                self.launcher.launch(self.core.launch_for(job_id, gpus))
            except GpusBusy:
                continue  # the GPU's previous job is still checkpointing
            resume = f" (resume from step {job.steps_done})" if job.steps_done else ""
            self.emit(f"{self.name}: {job_id} started on {','.join(gpus)}{resume}")

    def _kill_unstopped(self, now: float) -> None:
        """Every stop's escalation (a lease end, a move, a step target, the search's end):
        a job still running ``kill_after_s`` after its SIGTERM gets SIGKILL. What it
        checkpointed before stays in its checkpoint directory for its next run."""
        for r in self.runners.values():
            if not (r.live and r.stop_sent is not None and now - r.stop_sent > self.kill_after_s):
                continue
            why = r.segments[-1].stopped_by if r.segments else ""
            line = (f"{r.job_id} still running {now - r.stop_sent:.0f} s after its SIGTERM "
                    + ("at its step target" if why == "max-steps" else f"({why or 'stop'})")
                    + ": killed (SIGKILL), its checkpoints kept")
            log.warning("app %s: %s", self.name, line)
            self.emit(f"{self.name}: {line}")
            self.launcher.kill_tasks(r.job_id)

    def _past_target(self, r: Any, now: float) -> bool:
        """A run whose job is done with its rung (its event files show the run's step
        target) and that has not exited :data:`PAST_TARGET_GRACE_S` after: to be stopped."""
        job, seen = self.hb.jobs[r.job_id], self.core.record(r.job_id).seen_steps
        target = r.segments[-1].target_steps if r.segments else 0
        if job.status is JobStatus.RUNNING:  # (promoted meanwhile: the next rung's target)
            target = max(target, job.target_steps)
        past = bool(r.segments) and seen >= target
        if not self._past_targets.setdefault(r.job_id, PastTarget()).due(past, now):
            return False
        self.emit(f"{self.name}: {r.job_id} reached its step target {target} (step {seen}) "
                  "and still runs: stopped")
        return True

    def _assign(self, gpu_ids: list[str]) -> dict[str, tuple[str, ...]]:
        """Sticky split of the GPUs among the running jobs (:func:`~themis.am.packing.split`,
        the simulator's too): the jobs already running on them first."""
        states = {s.job_id: s for s in self.hb.job_states()}
        running = [j for j in self.hb.running_jobs() if not self.core.record(j.id).gave_up]
        avail = set(gpu_ids)
        current = {j.id: r.gpus for j in running if (r := self.runners[j.id]).live
                   and r.stop_sent is None and set(r.gpus) <= avail}
        return split([JobNeed(j.id, self.core.remaining_work(j), states[j.id].max_demand)
                      for j in running], [self.topology[g] for g in sorted(avail)], current,
                     counts=self.core.gpu_counts, max_jobs=self.spec.max_parallel_jobs or 0)

    def wind_down(self, now: float) -> None:
        for r in self.runners.values():  # jobs stopped when a trial reached the target,
            if r.live and r.stop_sent is None and self.hb.target_reached:  # or past theirs
                r.stop("target reached")
            elif r.live and r.stop_sent is None and self._past_target(r, now):
                self.launcher.stop(r.job_id, "max-steps")
        self._kill_unstopped(now)

    def on_finished(self, now: float, outcome: str) -> None:
        self.agent = None
        if self._held:
            self._held = []
            self.held_changes.append((round(now - self.t0, 3), []))
        if outcome == "killed":
            if self.state == "running":
                self.state = "stopped"
            return
        self.state = "failed" if outcome == "failed" else "done"
        if outcome == "failed":
            self.error = (self.core.objective_failure() if self.core.objective_never_seen
                          else "every trial failed; see the jobs' segment-*.err files")
        reached = " (target reached)" if self.hb.target_reached else ""
        if outcome == "failed":
            self.emit(f"{self.name}: FAILED after {now - self.start_time:.1f}s: {self.error}")
            return
        self.emit(f"{self.name}: DONE in {now - self.start_time:.1f}s{reached}; "
                  f"{self.summary()}")

    def publish(self, now: float) -> None:
        self._update_snapshot(now)

    # ------------------------------------------------------------------ introspection
    def steps_done(self) -> int:
        return sum(j.steps_done for j in self.hb.jobs.values())

    def _update_snapshot(self, now: float) -> None:
        live = self.live_rho(self._held) if self.state == "running" else None
        reported = self.rho_reported if self.rho_reported is not None else (
            self.bidder.current_rho() if self.bidder else None)
        if live is not None and not math.isfinite(live):
            live = None if self.state != "running" else math.inf
        jobs = list(self.hb.jobs.values())
        running_procs = sum(1 for r in self.runners.values() if r.live)
        stopping = sum(1 for r in self.runners.values() if r.live and r.stop_sent is not None)
        snap = {
            "name": self.name,
            "state": self.state,
            "rho": live,
            "rho_reported": reported,
            "gpus": list(self._held),
            "running": running_procs - stopping,
            "stopping": stopping,
            "waiting": sum(1 for j in jobs if j.status is JobStatus.RUNNING
                           and not self.runners[j.id].live),
            "done": sum(1 for j in jobs if j.status in (JobStatus.FINISHED, JobStatus.STOPPED,
                                                        JobStatus.RUNG_DONE)),
            "progress": min(1.0, self.steps_done() / max(1, self.planned_steps)),
            "bracket": self.hb.bracket_index,
            "rung": self.hb.rung_index,
            "error": self.error,
        }
        with self._lock:
            self._snapshot = snap
        if self.state == "running" and now - self._last_sample >= 1.0:
            self._last_sample = now
            self.samples.append(Sample(
                round(now - self.t0, 3), live,
                reported if reported is not None and math.isfinite(reported) else None,
                len(self._held), running_procs))

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._snapshot)
