package org.themis.yarn.round;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.themis.yarn.ThemisCapacityScheduler;
import org.themis.yarn.ThemisRuntime;
import org.themis.yarn.ThemisSettings;
import org.themis.yarn.lease.Lease;
import org.themis.yarn.lease.LeaseTable;

/**
 * The round driver thread (paper section 3.3.2: a round at lease expiries): every
 * {@code round-interval-ms}, or {@code freed-round-delay-ms} after GPUs were freed, or when
 * woken ({@link #signal}), it sends the cluster view ({@link ClusterView}) to the engine,
 * validates the lease grants of its reply against the GPUs free now and applies the valid ones,
 * then refreshes the apps' wait diagnostics.
 */
public final class RoundDriver {
  private static final Logger LOG = LoggerFactory.getLogger(RoundDriver.class);
  private static final ObjectMapper JSON = new ObjectMapper();

  private final ThemisRuntime runtime;
  private final ThemisCapacityScheduler scheduler;
  private final ThemisSettings settings;
  private final LeaseTable leases;
  private final ClusterView cluster;
  private final ReentrantLock lock = new ReentrantLock();
  private final Condition wake = lock.newCondition();
  private boolean signalled;
  /** When a round is due because GPUs were freed (0: none); guarded by {@link #lock}. */
  private long freedRoundAtMs;
  private volatile boolean running;
  private Thread thread;
  private final AtomicLong rounds = new AtomicLong();
  private final AtomicLong grantsApplied = new AtomicLong();
  private final AtomicLong grantsRefused = new AtomicLong();
  private final AtomicLong renewedInPlace = new AtomicLong();

  public RoundDriver(ThemisRuntime runtime, ClusterView cluster) {
    this.runtime = runtime;
    this.scheduler = runtime.scheduler();
    this.settings = runtime.settings();
    this.leases = runtime.leases();
    this.cluster = cluster;
  }

  /** Rounds run (an engine reply received) since the RM started. */
  public long rounds() { return rounds.get(); }
  public long grantsApplied() { return grantsApplied.get(); }
  public long grantsRefused() { return grantsRefused.get(); }
  /** Leases renewed in place by a round (docs/yarn.md, "Renewal in place"). */
  public long renewedInPlace() { return renewedInPlace.get(); }

  /** Starts the driver thread. */
  public void start() {
    running = true;
    thread = new Thread(this::loop, "themis-round-driver");
    thread.setDaemon(true);
    thread.start();
  }

  /** Stops the driver thread (waits for it up to 5 s); a no-op when it never started. */
  public void stop() {
    running = false;
    signal();
    Thread t = thread;
    if (t != null) {
      t.interrupt();
      try {
        t.join(5000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  /** Ask the round driver to look at the cluster now. */
  public void signal() {
    lock.lock();
    try {
      signalled = true;
      wake.signalAll();
    } finally {
      lock.unlock();
    }
  }

  /**
   * GPUs were freed: a round runs {@code freed-round-delay-ms} after the first of a burst of
   * such events (one round for a burst of completions), if some app waits for GPUs then.
   */
  public void gpusFreed() {
    lock.lock();
    try {
      runtime.metrics().gpusFreed(leases.now());
      if (freedRoundAtMs == 0) {
        freedRoundAtMs = System.currentTimeMillis() + settings.freedRoundDelayMs();
        wake.signalAll();
      }
    } finally {
      lock.unlock();
    }
  }

  private void loop() {
    // Start the engine now, not at the first round: AMs register with its agents' endpoint
    // before they ask for GPUs (an app in a round without its agent would be granted leases
    // it never hears of).
    runtime.engine().health();
    while (running) {
      lock.lock();
      try {
        long periodicAt = System.currentTimeMillis() + settings.roundIntervalMs();
        while (running && !signalled) {
          long at = freedRoundAtMs == 0 ? periodicAt : Math.min(periodicAt, freedRoundAtMs);
          long wait = at - System.currentTimeMillis();
          if (wait <= 0) {
            break;
          }
          wake.await(wait, TimeUnit.MILLISECONDS);
        }
        signalled = false;
        freedRoundAtMs = 0;
      } catch (InterruptedException e) {
        if (!running) {
          return;
        }
      } finally {
        lock.unlock();
      }
      if (!running) {
        return;
      }
      try {
        runtime.engine().supervise(); // a dead engine comes back before a round needs it
        runOneRound();
      } catch (RuntimeException e) {
        LOG.error("Themis round failed; leases unchanged", e);
      }
    }
  }

  /** Runs one round if there is something to decide. Returns the number of grants applied. */
  public int runOneRound() {
    if (!scheduler.recovery().settled()) {
      return 0; // after an RM restart: no grant before the NMs reported their containers
    }
    long id = rounds.get() + 1;
    long started = System.nanoTime();
    ObjectNode view = cluster.build(id);
    int applied = 0;
    if (view == null) {
      runtime.metrics().nothingToDecide();
    } else {
      Optional<String> reply = runtime.engine().runRound(view.toString());
      if (reply.isPresent()) {
        rounds.incrementAndGet();
        applied = applyGrants(reply.get(), cluster.takeRenewing());
        runtime.metrics().roundDone(leases.now(), (System.nanoTime() - started) / 1e6, applied);
        if (applied > 0) {
          LOG.info("Themis round {} applied {} lease grant(s)", id, applied);
        }
      }
    }
    updateDiagnostics();
    return applied;
  }

  /** Refreshes every app's wait diagnostics (a failure here never stops the rounds). */
  private void updateDiagnostics() {
    try {
      runtime.waits().update(scheduler.getRMContext(), cluster.appGpus(), leases.now(),
          cluster.grantableGpus(), cluster.clusterGpus(), leases.snapshot(),
          cluster.nodePartitions());
    } catch (RuntimeException e) {
      LOG.warn("Themis could not update the apps' wait diagnostics", e);
    }
  }

  /**
   * Validates the engine's grants against the free GPUs as they are now and applies the valid
   * ones. A grant for an unknown app or node, for more GPUs than are free, or on a node whose
   * partition the app may not use ({@link Partitions#mayUse}) is refused whole.
   */
  public int applyGrants(String replyJson) {
    return applyGrants(replyJson, Renewals.NONE);
  }

  /**
   * {@link #applyGrants(String)} for a round that offered the leases of {@code renewing} for
   * renewal: their GPUs count as free for the round's grants; a grant to a lease's holder on
   * its node renews it in place (same id, its containers go on; when the holder won fewer GPUs
   * there than the lease had, the rest keeps the old expiry as a lease of its own, so that the
   * containers beyond it are preempted then); a grant of them to another app is a lease on
   * GPUs the holder's containers free when its lease ends.
   */
  public int applyGrants(String replyJson, Renewals renewing) {
    JsonNode reply;
    try {
      reply = JSON.readTree(replyJson);
    } catch (java.io.IOException e) {
      LOG.error("Themis engine sent malformed JSON; no grants applied: {}", replyJson, e);
      return 0;
    }
    JsonNode grants = reply.path("grants");
    if (!grants.isArray()) {
      LOG.error("Themis engine reply has no 'grants' array; no grants applied: {}", replyJson);
      return 0;
    }
    runtime.metrics().engineInfo(reply.path("info"));
    synchronized (this) {
      Map<NodeId, Long> free = cluster.grantableGpus();
      for (Map.Entry<NodeId, Long> r : renewing.gpusPerNode().entrySet()) {
        free.merge(r.getKey(), r.getValue(), Long::sum);
      }
      // each app's partition (that of its pending GPU asks, else its app's or queue's default
      // expression) and the labels' exclusivity: a grant outside what the app may use is
      // refused (docs/yarn.md, "Partitions"), whatever the engine decided
      Map<ApplicationId, String> appPartition = new HashMap<>();
      for (AppGpus a : cluster.appGpus()) {
        appPartition.put(a.app(), a.partition());
      }
      Set<String> lending = Partitions.nonExclusive(
          Partitions.clusterLabels(scheduler.getRMContext().getNodeLabelManager()));
      Map<String, NodeId> nodesByName = new HashMap<>();
      for (NodeId n : free.keySet()) {
        nodesByName.put(n.toString(), n);
      }
      int applied = 0;
      for (JsonNode g : grants) {
        String appStr = g.path("app_id").asText("");
        String nodeStr = g.path("node_id").asText("");
        long gpus = g.path("gpus").asLong(0);
        NodeId node = nodesByName.get(nodeStr);
        ApplicationId app = parseApp(appStr);
        String why = null;
        if (app == null || !scheduler.getSchedulerApplications().containsKey(app)) {
          why = "unknown application";
        } else if (node == null) {
          why = "unknown node";
        } else if (gpus <= 0) {
          why = "non-positive GPU count";
        } else if (!Partitions.mayUse(appPartition(appPartition, app), partitionOf(node),
            lending)) {
          String np = partitionOf(node);
          why = "the app's partition " + name(appPartition(appPartition, app))
              + " may not use the node's partition " + name(np)
              + (np.isEmpty() ? "" : lending.contains(np) ? " (non-exclusive)" : " (exclusive)");
        } else if (gpus > free.getOrDefault(node, 0L)) {
          why = "only " + free.getOrDefault(node, 0L) + " GPU(s) free";
        }
        if (why != null) {
          grantsRefused.incrementAndGet();
          LOG.warn("Themis refused grant {}: {}", g, why);
          continue;
        }
        free.put(node, free.get(node) - gpus);
        // the lease records its node's partition (docs/yarn.md, "Partitions")
        String partition = partitionOf(node);
        // the length the engine spread this app's leases to (ThemisSettings.LEASE_SPREAD_MS)
        long lengthMs = settings.leaseLengthMs(
            g.path("lease_ms").asLong(settings.leaseDurationMs()));
        long left = gpus - renew(renewing.of(app, node), gpus, lengthMs);
        if (left > 0) {
          Lease l = leases.grant(app, node, partition, (int) left, lengthMs);
          LOG.info("Themis lease {}: {} GPU(s) on {} to {} until {}", l.id(), left, node, app,
              l.expiryMs());
        }
        grantsApplied.incrementAndGet();
        applied++;
      }
      return applied;
    }
  }

  /**
   * Renews the holder's leases offered for renewal on a node with up to {@code gpus} of the
   * GPUs it won there, soonest expiry first; returns the GPUs renewed.
   */
  private long renew(List<Lease> mine, long gpus, long lengthMs) {
    long left = gpus;
    for (Lease r : mine) {
      if (left <= 0) {
        break;
      }
      Lease x = leases.renewInPlace(r.id(), (int) Math.min(left, r.gpus()),
          leases.now() + lengthMs);
      if (x == null) {
        continue; // ended meanwhile (released, app gone): the GPUs go as a new lease
      }
      left -= x.gpus();
      renewedInPlace.incrementAndGet();
      LOG.info("Themis lease {} of {} on {} renewed in place: {} of its {} GPU(s) until {}",
          r.id(), r.app(), r.node(), x.gpus(), r.gpus(), x.expiryMs());
    }
    return gpus - left;
  }

  /** The node's partition now ("" the default partition). */
  private String partitionOf(NodeId node) {
    return Partitions.of(scheduler.getNodeTracker().getNode(node));
  }

  /**
   * The app's partition as this pass of applyGrants read it: that of its pending GPU asks,
   * else its app's or queue's default node-label expression ({@link ClusterView#appGpus});
   * an app the pass did not see: the default partition.
   */
  private static String appPartition(Map<ApplicationId, String> of, ApplicationId app) {
    String p = of.get(app);
    return p == null ? Partitions.DEFAULT : p;
  }

  /** A partition for the log: {@code <default>} or the label in quotes. */
  private static String name(String partition) {
    return partition.isEmpty() ? "<default>" : "'" + partition + "'";
  }

  private static ApplicationId parseApp(String s) {
    try {
      return ApplicationId.fromString(s);
    } catch (IllegalArgumentException e) {
      return null;
    }
  }
}
