package org.themis.yarn.lease;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;
import java.util.function.Predicate;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;

/**
 * The source of truth for who may hold GPUs where. Thread-safe: every method is atomic.
 * The scheduler reads it in tryCommit; the expiry policy and the round driver change it.
 */
public final class LeaseTable {
  private final LongSupplier clock;
  private final Map<Long, Lease> leases = new LinkedHashMap<>();
  private long nextId = 1;
  /** Told after every change (the restart store's writer, {@link LeaseStoreWriter}); may be null. */
  private volatile Runnable onChange;
  /**
   * The leases by app and node, rebuilt at the first lookup after a change: the placement
   * pre-check asks {@link #liveGpus} for every GPU ask on every node the scheduler visits,
   * which a scan of every lease made O(leases) under this table's lock (docs/yarn.md, Scale).
   */
  private Map<ApplicationId, Map<NodeId, List<Lease>>> byAppNode;

  public LeaseTable(LongSupplier clock) {
    this.clock = clock;
  }

  public LeaseTable() {
    this(System::currentTimeMillis);
  }

  public long now() {
    return clock.getAsLong();
  }

  /** Adds a lease of {@code gpus} GPUs in the default partition, valid {@code durationMs}. */
  public Lease grant(ApplicationId app, NodeId node, int gpus, long durationMs) {
    return grant(app, node, "", gpus, durationMs);
  }

  /**
   * Adds a lease of {@code gpus} GPUs valid for {@code durationMs} from now, on a node of
   * {@code partition} (its node label, "" for the default partition).
   */
  public synchronized Lease grant(ApplicationId app, NodeId node, String partition, int gpus,
      long durationMs) {
    if (gpus <= 0) {
      throw new IllegalArgumentException("lease must cover at least one GPU, got " + gpus);
    }
    if (durationMs <= 0) {
      throw new IllegalArgumentException("lease duration must be > 0 ms, got " + durationMs);
    }
    long now = now();
    Lease l = new Lease(nextId++, app, node, gpus, now, now + durationMs, Lease.State.ACTIVE, 0L,
        partition);
    leases.put(l.id(), l);
    changed();
    return l;
  }

  /**
   * Adds an ACTIVE lease with a given expiry (in the past too: it then expires at the next
   * enforcement pass), for GPUs that running containers use without a lease record after a
   * restart ({@link LeaseRecovery}).
   */
  public Lease adopt(ApplicationId app, NodeId node, int gpus, long expiryMs) {
    return adopt(app, node, "", gpus, expiryMs);
  }

  /** {@link #adopt(ApplicationId, NodeId, int, long)} on a node of {@code partition}. */
  public synchronized Lease adopt(ApplicationId app, NodeId node, String partition, int gpus,
      long expiryMs) {
    if (gpus <= 0) {
      throw new IllegalArgumentException("lease must cover at least one GPU, got " + gpus);
    }
    Lease l = new Lease(nextId++, app, node, gpus, now(), expiryMs, Lease.State.ACTIVE, 0L,
        partition);
    leases.put(l.id(), l);
    changed();
    return l;
  }

  /** Calls {@code r} after every change of the table (one listener; null removes it). */
  public void onChange(Runnable r) {
    onChange = r;
  }

  private void changed() {
    byAppNode = null;
    Runnable r = onChange;
    if (r != null) {
      r.run();
    }
  }

  /**
   * Puts leases read back after a ResourceManager restart ({@link LeaseRecovery}) into the
   * table as they are (ids, expiries, states); later grants get ids above {@code nextId} and
   * above every restored id.
   */
  public synchronized void restore(List<Lease> restored, long nextIdAtLeast) {
    for (Lease l : restored) {
      leases.put(l.id(), l);
      nextId = Math.max(nextId, l.id() + 1);
    }
    nextId = Math.max(nextId, nextIdAtLeast);
    changed();
  }

  /** The id the next grant gets (stored with the leases, so ids are not reused). */
  public synchronized long nextId() {
    return nextId;
  }

  /** GPUs that (app, node) may hold right now: the sum of its live leases on that node. */
  public synchronized long liveGpus(ApplicationId app, NodeId node) {
    long now = now();
    long sum = 0;
    for (Lease l : of(app, node)) {
      if (l.isLive(now)) {
        sum += l.gpus();
      }
    }
    return sum;
  }

  /** The leases of (app, node), from the index (caller holds the lock). */
  private List<Lease> of(ApplicationId app, NodeId node) {
    if (byAppNode == null) {
      Map<ApplicationId, Map<NodeId, List<Lease>>> m = new HashMap<>();
      for (Lease l : leases.values()) {
        m.computeIfAbsent(l.app(), k -> new HashMap<>())
            .computeIfAbsent(l.node(), k -> new ArrayList<>(2)).add(l);
      }
      byAppNode = m;
    }
    Map<NodeId, List<Lease>> perNode = byAppNode.get(app);
    List<Lease> out = perNode == null ? null : perNode.get(node);
    return out == null ? Collections.<Lease>emptyList() : out;
  }

  /** GPUs on {@code node} promised by live leases (any app). */
  public synchronized long liveGpusOnNode(NodeId node) {
    long now = now();
    long sum = 0;
    for (Lease l : leases.values()) {
      if (l.node().equals(node) && l.isLive(now)) {
        sum += l.gpus();
      }
    }
    return sum;
  }

  /** Moves ACTIVE leases past expiry to EXPIRING and returns them (each exactly once). */
  public synchronized List<Lease> expireDue(long graceMs) {
    long now = now();
    List<Lease> out = new ArrayList<>();
    for (Map.Entry<Long, Lease> e : leases.entrySet()) {
      Lease l = e.getValue();
      if (l.state() == Lease.State.ACTIVE && now >= l.expiryMs()) {
        Lease x = l.expiring(now + graceMs);
        e.setValue(x);
        out.add(x);
      }
    }
    if (!out.isEmpty()) {
      changed();
    }
    return out;
  }

  /** Removes EXPIRING leases whose grace period is over and returns them (each exactly once). */
  public synchronized List<Lease> removeGraceOver() {
    long now = now();
    return removeWhere(l -> l.state() == Lease.State.EXPIRING && now >= l.graceDeadlineMs());
  }

  /** Removes the leases that {@code which} accepts and returns them. */
  private List<Lease> removeWhere(Predicate<Lease> which) {
    List<Lease> out = new ArrayList<>();
    leases.values().removeIf(l -> {
      if (which.test(l)) {
        out.add(l);
        return true;
      }
      return false;
    });
    if (!out.isEmpty()) {
      changed();
    }
    return out;
  }

  public synchronized boolean remove(long leaseId) {
    boolean removed = leases.remove(leaseId) != null;
    if (removed) {
      changed();
    }
    return removed;
  }

  /**
   * Ends up to {@code gpus} GPUs of the live leases of (app, node) now, the soonest-expiring
   * lease first (a lease left with no GPU is removed). Returns the number of GPUs ended: less
   * than asked when the app holds fewer there (a GPU whose lease already ended counts as ended).
   */
  public synchronized int shrink(ApplicationId app, NodeId node, int gpus) {
    long now = now();
    List<Lease> live = new ArrayList<>();
    for (Lease l : leases.values()) {
      if (l.app().equals(app) && l.node().equals(node) && l.isLive(now)) {
        live.add(l);
      }
    }
    live.sort((a, b) -> Long.compare(a.expiryMs(), b.expiryMs()));
    int left = gpus;
    for (Lease l : live) {
      if (left <= 0) {
        break;
      }
      int cut = Math.min(left, l.gpus());
      if (cut == l.gpus()) {
        leases.remove(l.id());
      } else {
        leases.put(l.id(), l.withGpus(l.gpus() - cut));
      }
      left -= cut;
    }
    if (left < gpus) {
      changed();
    }
    return gpus - Math.max(left, 0);
  }

  /**
   * Renews a live lease in place: {@code gpus} GPUs (at most its current ones) until
   * {@code expiryMs}, keeping its id and grant time. Returns the renewed lease, or null when it
   * is gone or no longer ACTIVE.
   */
  public synchronized Lease renew(long leaseId, int gpus, long expiryMs) {
    Lease l = leases.get(leaseId);
    if (l == null || l.state() != Lease.State.ACTIVE) {
      return null;
    }
    if (gpus <= 0 || gpus > l.gpus()) {
      throw new IllegalArgumentException("renewal of lease " + leaseId + " must keep 1.."
          + l.gpus() + " GPU(s), got " + gpus);
    }
    Lease x = new Lease(l.id(), l.app(), l.node(), gpus, l.grantedAtMs(), expiryMs,
        Lease.State.ACTIVE, 0L, l.partition());
    leases.put(l.id(), x);
    changed();
    return x;
  }

  /**
   * Renews up to {@code gpus} GPUs of a live ACTIVE lease in place until {@code expiryMs} (a
   * round won them back for its holder: docs/yarn.md, "Renewal in place"), keeping its id; the
   * rest of its GPUs, if any, become a lease of their own with the old expiry, so that the
   * containers beyond the renewed GPUs are preempted when the lease would have ended. Returns
   * the renewed lease, or null when it is gone, no longer ACTIVE or past its expiry.
   */
  public synchronized Lease renewInPlace(long leaseId, int gpus, long expiryMs) {
    Lease l = leases.get(leaseId);
    if (l == null || !l.isLive(now()) || gpus <= 0) {
      return null;
    }
    int keep = Math.min(gpus, l.gpus());
    Lease x = new Lease(l.id(), l.app(), l.node(), keep, l.grantedAtMs(), expiryMs,
        Lease.State.ACTIVE, 0L, l.partition());
    leases.put(l.id(), x);
    if (keep < l.gpus()) {
      Lease rest = new Lease(nextId++, l.app(), l.node(), l.gpus() - keep, now(), l.expiryMs(),
          Lease.State.ACTIVE, 0L, l.partition());
      leases.put(rest.id(), rest);
    }
    changed();
    return x;
  }

  /** Drops every lease of an application (it finished); returns how many. */
  public synchronized int removeApp(ApplicationId app) {
    int before = leases.size();
    leases.values().removeIf(l -> l.app().equals(app));
    if (leases.size() < before) {
      changed();
    }
    return before - leases.size();
  }

  /**
   * Drops every lease on {@code node} (YARN removed it: lost, shut down, decommissioned);
   * returns them. The node's GPUs are gone with it, so no lease may promise them any more.
   */
  public synchronized List<Lease> removeNode(NodeId node) {
    return removeWhere(l -> l.node().equals(node));
  }

  /** Is there any EXPIRING lease for (app, node)? */
  public synchronized boolean hasExpiring(ApplicationId app, NodeId node) {
    for (Lease l : of(app, node)) {
      if (l.state() == Lease.State.EXPIRING) {
        return true;
      }
    }
    return false;
  }

  public synchronized List<Lease> snapshot() {
    return new ArrayList<>(leases.values());
  }

  public synchronized int size() {
    return leases.size();
  }
}
