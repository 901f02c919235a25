package org.themis.yarn.lease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.junit.jupiter.api.Test;

/** The reconciliation rule of LeaseRecovery (docs/yarn.md, "Restart and HA"). */
class LeaseReconcilerTest {
  private static final long NOW = 1_000_000;
  private static final long DURATION = 600_000;
  private final ApplicationId a = ApplicationId.newInstance(1, 1);
  private final ApplicationId b = ApplicationId.newInstance(1, 2);
  private final NodeId n1 = NodeId.newInstance("h1", 1);
  private final NodeId n2 = NodeId.newInstance("h2", 1);
  private long ids;

  private Lease lease(ApplicationId app, NodeId node, int gpus, long expiry, Lease.State st) {
    return new Lease(++ids, app, node, gpus, NOW - 10_000, expiry, st,
        st == Lease.State.EXPIRING ? expiry + 30_000 : 0L);
  }

  private Map<ApplicationId, Long> running(Object... appGpus) {
    Map<ApplicationId, Long> m = new HashMap<>();
    for (int i = 0; i < appGpus.length; i += 2) {
      m.put((ApplicationId) appGpus[i], ((Number) appGpus[i + 1]).longValue());
    }
    return m;
  }

  @Test
  void aContainerWithoutARecordGetsALeaseOfOneLeaseLengthFromNow() {
    List<LeaseReconciler.Adoption> out = LeaseReconciler.uncovered(n1, running(a, 2L),
        new ArrayList<Lease>(), NOW, DURATION);
    assertEquals(1, out.size());
    assertEquals(a, out.get(0).app);
    assertEquals(n1, out.get(0).node);
    assertEquals(2, out.get(0).gpus);
    assertEquals(NOW + DURATION, out.get(0).expiryMs);
  }

  @Test
  void recordsThatCoverTheRunningGpusAddNothing() {
    List<Lease> records = Arrays.asList(lease(a, n1, 1, NOW + 5, Lease.State.ACTIVE),
        lease(a, n1, 1, NOW + 9, Lease.State.ACTIVE));
    assertTrue(LeaseReconciler.uncovered(n1, running(a, 2L), records, NOW, DURATION).isEmpty());
    // more leased than running: kept as is (an agent app between jobs), nothing to add
    assertTrue(LeaseReconciler.uncovered(n1, running(a, 1L), records, NOW, DURATION).isEmpty());
  }

  @Test
  void gpusBeyondTheRecordsEndWithTheAppsLatestRecordOnTheNode() {
    List<Lease> records = Arrays.asList(lease(a, n1, 1, NOW + 5_000, Lease.State.ACTIVE),
        lease(a, n1, 1, NOW + 7_000, Lease.State.ACTIVE));
    List<LeaseReconciler.Adoption> out =
        LeaseReconciler.uncovered(n1, running(a, 3L), records, NOW, DURATION);
    assertEquals(1, out.size());
    assertEquals(1, out.get(0).gpus);
    assertEquals(NOW + 7_000, out.get(0).expiryMs);
  }

  @Test
  void containersOfAnExpiredOrExpiringRecordGetNoFreshLease() {
    // the record's end stands: the usual warning and grace period follow after recovery
    List<Lease> records = Arrays.asList(lease(a, n1, 2, NOW - 1_000, Lease.State.ACTIVE),
        lease(b, n1, 1, NOW - 2_000, Lease.State.EXPIRING));
    assertTrue(LeaseReconciler.uncovered(n1, running(a, 2L, b, 1L), records, NOW, DURATION)
        .isEmpty());
    // beyond an expired record: the extra GPUs expire with it
    List<LeaseReconciler.Adoption> out =
        LeaseReconciler.uncovered(n1, running(a, 3L), records, NOW, DURATION);
    assertEquals(1, out.size());
    assertEquals(NOW - 1_000, out.get(0).expiryMs);
  }

  @Test
  void recordsOfOtherNodesAndOtherAppsDoNotCover() {
    List<Lease> records = Arrays.asList(lease(a, n2, 4, NOW + 5_000, Lease.State.ACTIVE),
        lease(b, n1, 4, NOW + 5_000, Lease.State.ACTIVE));
    List<LeaseReconciler.Adoption> out =
        LeaseReconciler.uncovered(n1, running(a, 1L, b, 2L), records, NOW, DURATION);
    assertEquals(1, out.size());
    assertEquals(a, out.get(0).app);
    assertEquals(1, out.get(0).gpus);
    assertEquals(NOW + DURATION, out.get(0).expiryMs);
  }

  @Test
  void anExpiringRecordComesBackActiveWithItsPastExpiry() {
    Lease x = lease(a, n1, 2, NOW - 1_000, Lease.State.EXPIRING);
    Lease r = LeaseReconciler.restored(x);
    assertEquals(Lease.State.ACTIVE, r.state());
    assertEquals(x.id(), r.id());
    assertEquals(x.expiryMs(), r.expiryMs());
    assertEquals(x.grantedAtMs(), r.grantedAtMs());
    assertEquals(0L, r.graceDeadlineMs());
    assertTrue(!r.isLive(NOW), "past expiry: the first enforcement pass expires it");
    Lease active = lease(a, n1, 2, NOW + 1_000, Lease.State.ACTIVE);
    assertSame(active, LeaseReconciler.restored(active));
  }

  @Test
  void restoredExpiredLeasesGetAFullGracePeriodFromTheFirstPassAfterRecovery() {
    // what the enforcement pass after settling does with a restored past-expiry record
    long[] clock = {NOW};
    LeaseTable t = new LeaseTable(() -> clock[0]);
    Lease x = lease(a, n1, 2, NOW - 50_000, Lease.State.EXPIRING); // grace was to end NOW-20s
    t.restore(Arrays.asList(LeaseReconciler.restored(x)), 1);
    List<Lease> expired = t.expireDue(30_000);
    assertEquals(1, expired.size());
    assertEquals(NOW + 30_000, expired.get(0).graceDeadlineMs());
    assertTrue(t.removeGraceOver().isEmpty(), "not killed at once");
    clock[0] = NOW + 30_000;
    assertEquals(1, t.removeGraceOver().size());
  }
}
