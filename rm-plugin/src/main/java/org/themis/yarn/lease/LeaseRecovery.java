package org.themis.yarn.lease;

import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.server.resourcemanager.RMContext;
import org.apache.hadoop.yarn.server.resourcemanager.rmcontainer.RMContainer;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.themis.yarn.Gpus;
import org.themis.yarn.ThemisCapacityScheduler;
import org.themis.yarn.ThemisRuntime;
import org.themis.yarn.ThemisSettings;
import org.themis.yarn.status.WaitDiagnostics;

/**
 * Work-preserving ResourceManager restart for the lease table (docs/yarn.md, "Restart and
 * HA"). With {@code yarn.resourcemanager.recovery.enabled}:
 *
 * <ol>
 * <li>start (the scheduler's serviceStart, after the RM recovered its apps): loads the stored
 *     leases, drops those of apps the RM no longer knows, puts the rest back
 *     ({@link LeaseReconciler#restored}) and from then on writes every change of the table
 *     through to the store ({@link LeaseStoreWriter});</li>
 * <li>each NodeManager that re-registers reports its running containers; right after the
 *     scheduler recovered them, {@link #containersRecovered} gives every running GPU
 *     container a lease ({@link LeaseReconciler#uncovered}); while a node is being added its
 *     GPUs count as not grantable;</li>
 * <li>until recovery has settled ({@link #settle}) no round runs and no lease ends: settled
 *     once every node named by a restored lease is back and YARN's own work-preserving
 *     scheduling wait is over, or {@code recovery-settle-ms} after start at the latest. Then
 *     every node is reconciled once more, leases of apps that are not running are dropped, and
 *     the round driver is woken.</li>
 * </ol>
 *
 * Without recovery enabled this class does nothing (settled from the start, no store).
 */
public final class LeaseRecovery {
  private static final Logger LOG = LoggerFactory.getLogger(LeaseRecovery.class);
  private static final long PROGRESS_LOG_MS = 5000;
  private static final long STOP_FLUSH_MS = 5000;

  private final ThemisCapacityScheduler scheduler;
  private final ThemisSettings settings;
  private final LeaseTable leases;
  private final Configuration conf;
  private final boolean enabled;
  private final Set<NodeId> adding = ConcurrentHashMap.newKeySet();
  private volatile boolean settled;
  private volatile LeaseStoreWriter writer;
  private volatile String storeName = "none";
  /** Nodes named by restored leases: recovery waits for them (guarded by this). */
  private final Set<NodeId> waitFor = new TreeSet<NodeId>();
  private long startedAtMs;
  private long deadlineMs;
  private long lastProgressLogMs;
  private int restored;
  private int adopted;
  private int dropped;

  public LeaseRecovery(ThemisCapacityScheduler scheduler, ThemisSettings settings, LeaseTable leases,
      Configuration conf) {
    this.scheduler = scheduler;
    this.settings = settings;
    this.leases = leases;
    this.conf = conf;
    this.enabled = LeaseStores.recoveryEnabled(conf);
    this.settled = !enabled;
  }

  public boolean enabled() { return enabled; }
  /** Has recovery settled (always true without recovery)? Rounds run only then. */
  public boolean settled() { return settled; }
  /** Where leases are stored: {@code none}, {@code fs <file>}, {@code zookeeper <node>}. */
  public String storeName() { return storeName; }
  public synchronized int restoredLeases() { return restored; }
  public synchronized int adoptedLeases() { return adopted; }
  public synchronized int droppedLeases() { return dropped; }
  /** Completed writes to the store (0 without a store). */
  public long storeWrites() {
    LeaseStoreWriter w = writer;
    return w == null ? 0 : w.writes();
  }

  /** Waits until every change so far is in the store; false on timeout or without a store. */
  public boolean flush(long timeoutMs) throws InterruptedException {
    LeaseStoreWriter w = writer;
    return w != null && w.flush(timeoutMs);
  }

  public synchronized void start() throws IOException {
    if (!enabled) {
      return;
    }
    startedAtMs = leases.now();
    deadlineMs = startedAtMs + settings.recoverySettleMs();
    LeaseStore store = LeaseStores.open(conf, settings);
    if (store == null) {
      LOG.warn("Themis: {} is true but no lease store ({}={}, {}={}): after a restart leases "
          + "are rebuilt from the running containers only (exact expiries, leases between "
          + "jobs and agent apps are lost)", org.apache.hadoop.yarn.conf.YarnConfiguration
          .RECOVERY_ENABLED, ThemisSettings.LEASE_STORE, settings.leaseStore(),
          org.apache.hadoop.yarn.conf.YarnConfiguration.RM_STORE, LeaseStores.rmStoreClass(conf));
    } else {
      storeName = store.describe();
      StoredLeases stored;
      try {
        stored = store.load();
      } catch (IOException | RuntimeException e) {
        store.close();
        throw e;
      }
      if (stored != null) {
        restore(stored);
      } else {
        LOG.info("Themis recovery: no leases stored yet in {}", storeName);
      }
      LeaseStoreWriter w = new LeaseStoreWriter(store, this::snapshot);
      writer = w;
      leases.onChange(w::changed);
      w.start();
      w.changed(); // the table as restored (records of gone apps dropped)
    }
    LOG.info("Themis recovery: rounds wait until {} re-registered and YARN's scheduling wait "
        + "is over, at most {} ms ({})", waitFor.isEmpty() ? "no node" : "nodes " + waitFor,
        settings.recoverySettleMs(), ThemisSettings.RECOVERY_SETTLE_MS);
  }

  private void restore(StoredLeases stored) {
    RMContext rm = scheduler.getRMContext();
    List<Lease> keep = new ArrayList<Lease>();
    long now = leases.now();
    int pastExpiry = 0;
    for (Lease l : stored.leases()) {
      if (!rm.getRMApps().containsKey(l.app())) {
        dropped++;
        LOG.info("Themis recovery: lease {} ({} GPU(s) of {} on {}) dropped: the app is gone",
            l.id(), l.gpus(), l.app(), l.node());
        continue;
      }
      Lease r = LeaseReconciler.restored(l);
      if (r.expiryMs() <= now) {
        pastExpiry++;
      }
      keep.add(r);
      waitFor.add(r.node());
    }
    leases.restore(keep, stored.nextId());
    restored = keep.size();
    ThemisRuntime rt = scheduler.runtime();
    int agents = 0;
    for (ApplicationId a : stored.agentApps()) {
      if (rm.getRMApps().containsKey(a) && rt != null) {
        rt.agents().agentJoined(a.toString());
        agents++;
      }
    }
    LOG.info("Themis recovery: {} lease(s) restored from {} (written {}), {} of them past "
        + "expiry (warned after recovery, killed a grace period later), {} dropped (apps gone); "
        + "{} app(s) with a Themis agent", restored, storeName,
        WaitDiagnostics.time(stored.writtenMs()), pastExpiry, dropped, agents);
  }

  private StoredLeases snapshot() {
    ThemisRuntime rt = scheduler.runtime();
    Set<ApplicationId> agents = rt == null ? new TreeSet<ApplicationId>() : rt.agents().agentApps();
    return new StoredLeases(leases.snapshot(), leases.nextId(), agents, leases.now());
  }

  public void stop() {
    LeaseStoreWriter w = writer;
    if (w != null) {
      w.stop(STOP_FLUSH_MS);
      leases.onChange(null);
      writer = null;
    }
  }

  /** The set of apps with an agent changed: store it with the leases. */
  public void agentsChanged() {
    LeaseStoreWriter w = writer;
    if (w != null) {
      w.changed();
    }
  }

  // ------------------------------------------------------------------ NodeManagers report back

  /** A node is being added (NODE_ADDED): its containers are not recovered yet. */
  public void nodeAdding(NodeId node) {
    if (enabled) {
      adding.add(node);
    }
  }

  public void nodeAdded(NodeId node) {
    adding.remove(node);
  }

  /** Is the node being added (its GPUs count as not grantable until its containers are in)? */
  public boolean nodeRecovering(NodeId node) {
    return adding.contains(node);
  }

  /** The scheduler recovered the containers a (re-)registering NodeManager reported. */
  public void containersRecovered(NodeId node) {
    if (enabled) {
      reconcileNode(node);
    }
  }

  private synchronized int reconcileNode(NodeId node) {
    FiCaSchedulerNode n = scheduler.getNodeTracker().getNode(node);
    if (n == null) {
      return 0;
    }
    Map<ApplicationId, Long> running = new HashMap<ApplicationId, Long>();
    for (RMContainer c : n.getCopiedListOfRunningContainers()) {
      long g = Gpus.of(c.getAllocatedResource());
      if (g > 0) {
        ApplicationId app = c.getApplicationAttemptId().getApplicationId();
        Long old = running.get(app);
        running.put(app, (old == null ? 0L : old) + g);
      }
    }
    if (running.isEmpty()) {
      return 0;
    }
    int n0 = 0;
    for (LeaseReconciler.Adoption a : LeaseReconciler.uncovered(node, running,
        leases.snapshot(), leases.now(), settings.leaseDurationMs())) {
      // the node's partition now (it re-registered with its labels; docs/yarn.md, "Partitions")
      Lease l = leases.adopt(a.app, a.node, n.getPartition(), a.gpus, a.expiryMs);
      n0++;
      adopted++;
      LOG.info("Themis recovery: lease {} for {} GPU(s) of {} on {} until {}: its running "
          + "container(s) there had no lease record", l.id(), l.gpus(), l.app(), l.node(),
          WaitDiagnostics.time(l.expiryMs()));
    }
    return n0;
  }

  // ------------------------------------------------------------------ settling

  /**
   * Called before every enforcement pass: true once recovery has settled (at once without
   * recovery). The pass that settles it reconciles every node, drops leases of apps that are
   * not running and wakes the round driver.
   */
  boolean settle() {
    if (settled) {
      return true;
    }
    synchronized (this) {
      if (settled) {
        return true;
      }
      long now = leases.now();
      List<NodeId> missing = new ArrayList<NodeId>();
      for (NodeId n : waitFor) {
        if (scheduler.getNodeTracker().getNode(n) == null) {
          missing.add(n);
        }
      }
      RMContext rm = scheduler.getRMContext();
      boolean yarnReady = !rm.isWorkPreservingRecoveryEnabled()
          || rm.isSchedulerReadyForAllocatingContainers();
      boolean timeout = now >= deadlineMs;
      if (!timeout && (!missing.isEmpty() || !adding.isEmpty() || !yarnReady)) {
        if (now - lastProgressLogMs >= PROGRESS_LOG_MS) {
          lastProgressLogMs = now;
          LOG.info("Themis recovery: waiting for {}{}(settles at {} at the latest)",
              missing.isEmpty() ? "" : "nodes " + missing + " ",
              yarnReady ? "" : "YARN's work-preserving scheduling wait ",
              WaitDiagnostics.time(deadlineMs));
        }
        return false;
      }
      for (FiCaSchedulerNode n : scheduler.getNodeTracker().getAllNodes()) {
        reconcileNode(n.getNodeID());
      }
      int droppedNow = 0;
      for (Lease l : leases.snapshot()) {
        if (!scheduler.getSchedulerApplications().containsKey(l.app()) && leases.remove(l.id())) {
          droppedNow++;
          LOG.info("Themis recovery: lease {} ({} GPU(s) of {} on {}) dropped: the app is not "
              + "running", l.id(), l.gpus(), l.app(), l.node());
        }
      }
      dropped += droppedNow;
      int pastExpiry = 0;
      for (Lease l : leases.snapshot()) {
        if (!l.isLive(now)) {
          pastExpiry++;
        }
      }
      settled = true;
      LOG.info("Themis recovery settled after {} ms ({}): {} lease(s) in the table, {} new for "
          + "running containers without a record, {} dropped; {} past expiry are warned now "
          + "and killed after {} ms; rounds resume", now - startedAtMs,
          timeout && (!missing.isEmpty() || !yarnReady)
              ? "timeout " + ThemisSettings.RECOVERY_SETTLE_MS + (missing.isEmpty() ? ""
                  : ", nodes not back: " + missing) : "every node with leases is back",
          leases.size(), adopted, dropped, pastExpiry, settings.gracePeriodMs());
      ThemisRuntime rt = scheduler.runtime();
      if (rt != null) {
        rt.driver().signal();
      }
      return true;
    }
  }
}
