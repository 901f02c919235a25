package org.themis.yarn.lease;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.server.resourcemanager.rmcontainer.RMContainer;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerApplication;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerApp;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.ContainerPreemptEvent;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.SchedulerEventType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.themis.yarn.Gpus;
import org.themis.yarn.LeaseExpiryPolicy;
import org.themis.yarn.ThemisCapacityScheduler;
import org.themis.yarn.ThemisRuntime;
import org.themis.yarn.ThemisSettings;
import org.themis.yarn.status.WaitDiagnostics;

/**
 * Lease expiry (paper section 3.3.2: a round's outcome binds for a lease duration, then the
 * GPUs go back to the next round): a container over its app's live leases is marked for
 * preemption when the lease expires and killed after the grace period; leases of finished apps
 * go; under the stock-app policy {@code hold} the leases of apps without a Themis agent renew
 * while their containers run. Runs on its own thread every {@code monitor-interval-ms},
 * whatever the scheduling-monitor keys say, and also from {@link LeaseExpiryPolicy} when that
 * policy is listed.
 */
public final class LeaseEnforcer {
  private static final Logger LOG = LoggerFactory.getLogger(LeaseEnforcer.class);

  private final ThemisRuntime runtime;
  private final ThemisCapacityScheduler scheduler;
  private final ThemisSettings settings;
  private final LeaseTable leases;
  private final Object enforceLock = new Object();
  private ScheduledExecutorService thread;
  private final AtomicLong enforcementPasses = new AtomicLong();
  private final AtomicLong preemptMarks = new AtomicLong();
  private final AtomicLong killMarks = new AtomicLong();
  private final AtomicLong renewals = new AtomicLong();
  /** Leases whose max hold was reached (logged once each). */
  private final Set<Long> holdOver = ConcurrentHashMap.newKeySet();

  public LeaseEnforcer(ThemisRuntime runtime) {
    this.runtime = runtime;
    this.scheduler = runtime.scheduler();
    this.settings = runtime.settings();
    this.leases = runtime.leases();
  }

  public long preemptMarks() { return preemptMarks.get(); }
  public long killMarks() { return killMarks.get(); }
  /** Lease renewals under the stock-app policy {@code hold}. */
  public long renewals() { return renewals.get(); }
  /** Completed lease-enforcement passes (built-in thread and LeaseExpiryPolicy together). */
  public long enforcementPasses() { return enforcementPasses.get(); }

  /**
   * Starts the built-in enforcement thread. Lease enforcement runs here, not only through
   * LeaseExpiryPolicy: the RM's scheduling monitors run only when
   * yarn.resourcemanager.scheduler.monitor.enable/.policies say so, and an admin "yarn rmadmin
   * -refreshQueues" re-reads those keys and stops a policy that is no longer listed. A lease
   * must be enforced whatever they say (docs/yarn.md).
   */
  public void start() {
    thread = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "themis-lease-enforcer");
      t.setDaemon(true);
      return t;
    });
    thread.scheduleWithFixedDelay(this::enforceLeasesSafely, settings.monitorIntervalMs(),
        settings.monitorIntervalMs(), TimeUnit.MILLISECONDS);
    LOG.info("Themis lease enforcement every {} ms (built in; {} in the monitor policies is "
        + "optional); apps without a Themis agent: {}={}, {}={} ms",
        settings.monitorIntervalMs(), LeaseExpiryPolicy.class.getName(),
        ThemisSettings.STOCK_APP_POLICY, settings.stockAppPolicy().name().toLowerCase(),
        ThemisSettings.STOCK_APP_MAX_HOLD_MS, settings.stockAppMaxHoldMs());
  }

  public void stop() {
    ScheduledExecutorService ex = thread;
    if (ex != null) {
      ex.shutdownNow();
    }
  }

  private void enforceLeasesSafely() {
    try {
      enforceLeases();
    } catch (RuntimeException e) {
      // An exception would cancel the scheduled task: log it and keep enforcing.
      LOG.error("Themis lease enforcement pass failed; next pass in {} ms",
          settings.monitorIntervalMs(), e);
    }
  }

  /**
   * Expiry: preempt at expiry, kill after the grace period, drop leases of finished apps.
   * Runs on the built-in enforcer thread and, when configured, from LeaseExpiryPolicy; passes
   * are serialised (each lease changes state exactly once either way).
   */
  public void enforceLeases() {
    synchronized (enforceLock) {
      if (!scheduler.recovery().settle()) {
        return; // after an RM restart nothing ends before the NMs reported their containers
      }
      enforceLeasesLocked();
      enforcementPasses.incrementAndGet();
    }
  }

  private void enforceLeasesLocked() {
    runtime.agents().forgetGoneApps();
    boolean changed = false;
    for (Lease l : leases.snapshot()) {
      if (!scheduler.getSchedulerApplications().containsKey(l.app())) {
        leases.remove(l.id());
        changed = true;
      }
    }
    renewStockLeases();
    for (Lease l : leases.expireDue(settings.gracePeriodMs())) {
      List<RMContainer> victims = containersOverLease(l.app(), l.node());
      LOG.info("Themis lease {} expired ({} GPU(s) of {} on {}); preempting {} container(s)",
          l.id(), l.gpus(), l.app(), l.node(), victims.size());
      if (victims.isEmpty()) {
        leases.remove(l.id());
      }
      for (RMContainer c : victims) {
        send(c, SchedulerEventType.MARK_CONTAINER_FOR_PREEMPTION);
        preemptMarks.incrementAndGet();
      }
      changed = true;
    }
    for (Lease l : leases.removeGraceOver()) {
      List<RMContainer> victims = containersOverLease(l.app(), l.node());
      if (!victims.isEmpty()) {
        LOG.info("Themis lease {} grace period over; killing {} container(s) of {} on {}",
            l.id(), victims.size(), l.app(), l.node());
      }
      for (RMContainer c : victims) {
        send(c, SchedulerEventType.MARK_CONTAINER_FOR_KILLABLE);
        killMarks.incrementAndGet();
      }
      changed = true;
    }
    if (changed) {
      runtime.metrics().gpusFreed(leases.now());
      runtime.driver().signal();
    }
  }

  /**
   * Stock-app policy {@code hold}: a lease of an app without a Themis agent whose GPU containers
   * still run on its node is renewed shortly before it expires (within two enforcement
   * intervals, so that it never lapses), for the GPUs those containers use there and for one
   * more lease length, but never past {@code stock-app.max-hold-ms} after it was granted: then
   * it expires and is enforced like any lease. GPUs it no longer uses go back at renewal.
   */
  private void renewStockLeases() {
    if (settings.stockAppPolicy() != ThemisSettings.StockAppPolicy.HOLD) {
      return;
    }
    long now = leases.now();
    long ahead = 2 * settings.monitorIntervalMs();
    for (Lease l : leases.snapshot()) {
      if (l.state() != Lease.State.ACTIVE || l.expiryMs() - now > ahead
          || runtime.agents().hasAgent(l.app())) {
        continue;
      }
      long holdEnd = l.grantedAtMs() + settings.stockAppMaxHoldMs();
      if (l.expiryMs() >= holdEnd) {
        if (holdOver.add(l.id())) {
          LOG.info("Themis lease {} of {} on {} reached {} ({} ms since {}): it ends at {} and "
              + "is enforced like any lease", l.id(), l.app(), l.node(),
              ThemisSettings.STOCK_APP_MAX_HOLD_MS, settings.stockAppMaxHoldMs(),
              WaitDiagnostics.time(l.grantedAtMs()), WaitDiagnostics.time(l.expiryMs()));
        }
        continue;
      }
      // GPUs its containers use on the node beyond its other live leases there
      long others = leases.liveGpus(l.app(), l.node()) - (l.isLive(now) ? l.gpus() : 0);
      long need = scheduler.usedGpus(l.app(), l.node()) - others;
      if (need <= 0) {
        continue; // nothing of it in use: it expires (no container to preempt)
      }
      int keep = (int) Math.min(l.gpus(), need);
      long until = Math.min(l.expiryMs() + settings.leaseDurationMs(), holdEnd);
      Lease r = leases.renew(l.id(), keep, until);
      if (r == null) {
        continue;
      }
      renewals.incrementAndGet();
      LOG.info("Themis lease {} of {} on {} renewed: {} GPU(s) in use until {} ({}=hold, at "
          + "most until {})", l.id(), l.app(), l.node(), keep, WaitDiagnostics.time(until),
          ThemisSettings.STOCK_APP_POLICY, WaitDiagnostics.time(holdEnd));
      if (keep < l.gpus()) {
        runtime.countEndedEarly(l.gpus() - keep);
        runtime.driver().gpusFreed();
      }
    }
  }

  private void send(RMContainer c, SchedulerEventType type) {
    ApplicationAttemptId attempt = c.getApplicationAttemptId();
    scheduler.getRMContext().getDispatcher().getEventHandler()
        .handle(new ContainerPreemptEvent(attempt, c, type));
  }

  /** The app's GPU containers on the node beyond what its live leases cover, newest first. */
  List<RMContainer> containersOverLease(ApplicationId app, NodeId node) {
    SchedulerApplication<FiCaSchedulerApp> sa = scheduler.getSchedulerApplications().get(app);
    List<RMContainer> out = new ArrayList<>();
    if (sa == null || sa.getCurrentAppAttempt() == null) {
      return out;
    }
    List<RMContainer> gpuContainers = new ArrayList<>();
    long used = 0;
    for (RMContainer c : sa.getCurrentAppAttempt().getLiveContainersMap().values()) {
      long g = Gpus.of(c.getAllocatedResource());
      if (g > 0 && node.equals(c.getAllocatedNode())) {
        gpuContainers.add(c);
        used += g;
      }
    }
    long excess = used - leases.liveGpus(app, node);
    gpuContainers.sort(Comparator.comparing(RMContainer::getContainerId).reversed());
    for (RMContainer c : gpuContainers) {
      if (excess <= 0) {
        break;
      }
      out.add(c);
      excess -= Gpus.of(c.getAllocatedResource());
    }
    return out;
  }
}
