package org.themis.yarn.lease;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;

/**
 * The rule that reconciles stored lease records with the containers the NodeManagers report
 * after a ResourceManager restart (docs/yarn.md, "Restart and HA"). Pure functions: no YARN
 * state, so that the rule is unit-tested on its own ({@code LeaseReconcilerTest}).
 *
 * <ol>
 * <li>A record whose application is gone is dropped.</li>
 * <li>A record that was EXPIRING (in its grace period) comes back ACTIVE with its past expiry:
 *     the first enforcement pass after recovery has settled warns its containers again and
 *     its grace period starts then (the preemption notice of the old RM died with it), so no
 *     container is killed at once because of the restart. An ACTIVE record whose expiry passed
 *     while the RM was down is treated the same way by that pass.</li>
 * <li>A running GPU container always keeps a lease: GPUs that an app's running containers
 *     use on a node beyond all its records there (any state) get a lease of their own, which
 *     ends with the app's latest record on that node, or one lease length from now when it has
 *     none there. So no GPU in use is offered to another app.</li>
 * <li>A record with fewer running GPUs than it covers is kept (an app with a Themis agent
 *     keeps its lease between jobs; the usual expiry ends it otherwise).</li>
 * </ol>
 */
final class LeaseReconciler {
  private LeaseReconciler() {}

  /** A lease to add for GPUs in use that no record covers. */
  static final class Adoption {
    final ApplicationId app;
    final NodeId node;
    final int gpus;
    final long expiryMs;

    Adoption(ApplicationId app, NodeId node, int gpus, long expiryMs) {
      this.app = app;
      this.node = node;
      this.gpus = gpus;
      this.expiryMs = expiryMs;
    }

    @Override
    public String toString() {
      return gpus + " GPU(s) of " + app + " on " + node + " until " + expiryMs;
    }
  }

  /** Rule 2: a record as it goes back into the table. */
  static Lease restored(Lease l) {
    if (l.state() == Lease.State.EXPIRING) {
      return new Lease(l.id(), l.app(), l.node(), l.gpus(), l.grantedAtMs(), l.expiryMs(),
          Lease.State.ACTIVE, 0L, l.partition());
    }
    return l;
  }

  /**
   * Rule 3 on one node: {@code running} = GPUs of each app's running containers there,
   * {@code records} = the leases in the table (any node; others are ignored).
   */
  static List<Adoption> uncovered(NodeId node, Map<ApplicationId, Long> running,
      List<Lease> records, long nowMs, long leaseDurationMs) {
    Map<ApplicationId, Long> covered = new TreeMap<ApplicationId, Long>();
    Map<ApplicationId, Long> latest = new TreeMap<ApplicationId, Long>();
    for (Lease l : records) {
      if (!l.node().equals(node)) {
        continue;
      }
      Long c = covered.get(l.app());
      covered.put(l.app(), (c == null ? 0L : c) + l.gpus());
      Long e = latest.get(l.app());
      latest.put(l.app(), e == null ? l.expiryMs() : Math.max(e, l.expiryMs()));
    }
    List<Adoption> out = new ArrayList<Adoption>();
    for (Map.Entry<ApplicationId, Long> r : new TreeMap<ApplicationId, Long>(running).entrySet()) {
      Long c = covered.get(r.getKey());
      long missing = r.getValue() - (c == null ? 0L : c);
      if (missing <= 0) {
        continue;
      }
      Long e = latest.get(r.getKey());
      long expiry = e == null ? nowMs + leaseDurationMs : e;
      out.add(new Adoption(r.getKey(), node, (int) missing, expiry));
    }
    return out;
  }
}
