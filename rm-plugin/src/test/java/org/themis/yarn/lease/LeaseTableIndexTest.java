package org.themis.yarn.lease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Collections;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.junit.jupiter.api.Test;

/**
 * {@link LeaseTable#liveGpus} and {@link LeaseTable#hasExpiring} answer from an index by
 * (app, node): every way the table changes must show in the next answer, as a scan of all
 * leases would give it.
 */
class LeaseTableIndexTest {
  private final AtomicLong now = new AtomicLong(1_000);
  private final LeaseTable t = new LeaseTable(now::get);
  private final ApplicationId a = ApplicationId.newInstance(1, 1);
  private final ApplicationId b = ApplicationId.newInstance(1, 2);
  private final NodeId n1 = NodeId.newInstance("h1", 1);
  private final NodeId n2 = NodeId.newInstance("h2", 1);

  /** The sum a scan of every lease gives. */
  private long scanned(ApplicationId app, NodeId node) {
    long sum = 0;
    for (Lease l : t.snapshot()) {
      if (l.app().equals(app) && l.node().equals(node) && l.isLive(now.get())) {
        sum += l.gpus();
      }
    }
    return sum;
  }

  private void same() {
    for (ApplicationId app : new ApplicationId[] {a, b}) {
      for (NodeId node : new NodeId[] {n1, n2}) {
        assertEquals(scanned(app, node), t.liveGpus(app, node), app + " on " + node);
      }
    }
  }

  @Test
  void everyChangeShowsInTheNextLookup() {
    same(); // empty table, index built empty
    Lease first = t.grant(a, n1, 2, 100);
    assertEquals(2, t.liveGpus(a, n1));
    t.grant(a, n1, 1, 300);
    t.grant(b, n1, 4, 100);
    Lease renewable = t.grant(b, n2, 3, 100);
    same();
    assertEquals(3, t.liveGpus(a, n1));
    t.shrink(a, n1, 1); // soonest-expiring lease first: first keeps 1 GPU
    same();
    assertEquals(2, t.liveGpus(a, n1));
    t.renew(renewable.id(), 2, 2_000);
    same();
    assertEquals(2, t.liveGpus(b, n2));
    now.addAndGet(100); // expiry by time alone, no change of the table
    assertEquals(1, t.liveGpus(a, n1), "the 300 ms lease only");
    assertEquals(0, t.liveGpus(b, n1));
    same();
    assertFalse(t.hasExpiring(a, n1));
    assertEquals(2, t.expireDue(0).size()); // first (a, n1) and b's on n1
    assertTrue(t.hasExpiring(a, n1));
    assertTrue(t.hasExpiring(b, n1));
    assertFalse(t.hasExpiring(b, n2));
    same();
    assertEquals(2, t.removeGraceOver().size());
    assertFalse(t.hasExpiring(a, n1));
    same();
    t.adopt(a, n2, 5, 5_000);
    assertEquals(5, t.liveGpus(a, n2));
    t.removeApp(a);
    assertEquals(0, t.liveGpus(a, n2));
    assertEquals(0, t.liveGpus(a, n1));
    same();
    t.remove(renewable.id());
    assertEquals(0, t.liveGpus(b, n2));
    t.restore(Collections.singletonList(new Lease(first.id(), b, n2, 6, now.get(),
        now.get() + 50, Lease.State.ACTIVE, 0L)), 10);
    assertEquals(6, t.liveGpus(b, n2));
    same();
  }
}
