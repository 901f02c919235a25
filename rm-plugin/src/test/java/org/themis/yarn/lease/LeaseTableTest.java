package org.themis.yarn.lease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.junit.jupiter.api.Test;

class LeaseTableTest {
  private final AtomicLong now = new AtomicLong(1_000);
  private final LeaseTable t = new LeaseTable(now::get);
  private final ApplicationId a = ApplicationId.newInstance(1, 1);
  private final ApplicationId b = ApplicationId.newInstance(1, 2);
  private final NodeId n1 = NodeId.newInstance("h1", 1);
  private final NodeId n2 = NodeId.newInstance("h2", 1);

  @Test
  void liveLeasesSumPerAppAndNode() {
    t.grant(a, n1, 2, 100);
    t.grant(a, n1, 1, 100);
    t.grant(a, n2, 4, 100);
    t.grant(b, n1, 1, 100);
    assertEquals(3, t.liveGpus(a, n1));
    assertEquals(4, t.liveGpus(a, n2));
    assertEquals(0, t.liveGpus(b, n2));
    assertEquals(4, t.liveGpusOnNode(n1));
  }

  @Test
  void expiryThenGraceThenRemoval() {
    Lease l = t.grant(a, n1, 2, 100);
    assertTrue(t.expireDue(50).isEmpty());
    now.addAndGet(100);
    assertEquals(0, t.liveGpus(a, n1), "not live at expiry even before the policy runs");
    List<Lease> expired = t.expireDue(50);
    assertEquals(1, expired.size());
    assertEquals(Lease.State.EXPIRING, expired.get(0).state());
    assertEquals(l.id(), expired.get(0).id());
    assertTrue(t.expireDue(50).isEmpty(), "reported once");
    assertTrue(t.hasExpiring(a, n1));
    assertTrue(t.removeGraceOver().isEmpty());
    now.addAndGet(50);
    assertEquals(1, t.removeGraceOver().size());
    assertEquals(0, t.size());
  }

  @Test
  void shrinkEndsSoonestExpiringGpusFirstAndOnlyLiveOnes() {
    Lease late = t.grant(a, n1, 2, 500);
    Lease soon = t.grant(a, n1, 1, 100);
    Lease other = t.grant(a, n2, 3, 100);
    assertEquals(2, t.shrink(a, n1, 2));
    assertEquals(1, t.liveGpus(a, n1));
    assertTrue(t.snapshot().stream().noneMatch(l -> l.id() == soon.id()), "emptied lease removed");
    assertEquals(1, t.snapshot().stream().filter(l -> l.id() == late.id()).findFirst()
        .orElseThrow().gpus(), "the later lease keeps 1 GPU, same id and expiry");
    assertEquals(3, t.liveGpus(a, n2), "other nodes untouched");
    assertEquals(1, t.shrink(a, n1, 5), "asks more than held: ends what is held");
    assertEquals(0, t.shrink(b, n1, 1));
    now.addAndGet(100);
    t.expireDue(50);
    assertEquals(0, t.shrink(a, n2, 3), "an expiring lease is not live: nothing to end");
    assertEquals(other.id(), t.snapshot().get(0).id());
  }

  @Test
  void removeAppAndBadGrants() {
    t.grant(a, n1, 1, 10);
    t.grant(b, n1, 1, 10);
    assertEquals(1, t.removeApp(a));
    assertEquals(1, t.size());
    assertThrows(IllegalArgumentException.class, () -> t.grant(a, n1, 0, 10));
    assertThrows(IllegalArgumentException.class, () -> t.grant(a, n1, 1, 0));
  }

  @Test
  void removeNodeEndsEveryLeaseThereAndOnlyThere() {
    t.grant(a, n1, 2, 100);
    t.grant(b, n1, 1, 100);
    Lease other = t.grant(a, n2, 1, 100);
    now.addAndGet(100);
    t.expireDue(50); // an EXPIRING lease on the node goes too
    t.grant(b, n1, 1, 100);
    List<Lease> ended = t.removeNode(n1);
    assertEquals(3, ended.size());
    assertEquals(0, t.liveGpusOnNode(n1));
    assertEquals(1, t.size());
    assertEquals(other.id(), t.snapshot().get(0).id());
    assertTrue(t.removeNode(n1).isEmpty(), "nothing left there");
  }

  @Test
  void renewKeepsIdAndGrantTimeAndOnlyActiveLeasesRenew() {
    Lease l = t.grant(a, n1, 2, 100);
    now.addAndGet(90);
    Lease r = t.renew(l.id(), 1, now.get() + 100);
    assertEquals(l.id(), r.id());
    assertEquals(l.grantedAtMs(), r.grantedAtMs());
    assertEquals(1, t.liveGpus(a, n1));
    now.addAndGet(50);
    assertEquals(1, t.liveGpus(a, n1), "live past its first expiry");
    assertThrows(IllegalArgumentException.class, () -> t.renew(l.id(), 2, now.get() + 10));
    now.addAndGet(100);
    t.expireDue(10);
    assertEquals(null, t.renew(l.id(), 1, now.get() + 100), "an EXPIRING lease stays expiring");
    assertEquals(null, t.renew(999, 1, now.get() + 100));
  }

  @Test
  void concurrentGrantsGetUniqueIds() throws Exception {
    LeaseTable shared = new LeaseTable();
    List<Thread> ts = new ArrayList<>();
    for (int i = 0; i < 8; i++) {
      Thread th = new Thread(() -> {
        for (int k = 0; k < 500; k++) {
          shared.grant(a, n1, 1, 60_000);
          shared.liveGpus(a, n1);
        }
      });
      ts.add(th);
      th.start();
    }
    for (Thread th : ts) {
      th.join();
    }
    assertEquals(4000, shared.size());
    assertEquals(4000, shared.liveGpus(a, n1));
    assertEquals(4000, shared.snapshot().stream().map(Lease::id).distinct().count());
  }
}
