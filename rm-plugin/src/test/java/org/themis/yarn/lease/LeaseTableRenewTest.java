package org.themis.yarn.lease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.junit.jupiter.api.Test;

/** {@link LeaseTable#renewInPlace}: a round won a lease's GPUs back for its holder. */
class LeaseTableRenewTest {
  private final AtomicLong clock = new AtomicLong(1_000_000L);
  private final LeaseTable table = new LeaseTable(clock::get);
  private final ApplicationId app = ApplicationId.newInstance(1L, 1);
  private final NodeId node = NodeId.newInstance("n1", 1);

  @Test
  void allItsGpusWonBackKeepTheLeaseAndItsId() {
    Lease l = table.grant(app, node, "", 2, 60_000L);
    clock.addAndGet(50_000L);
    Lease r = table.renewInPlace(l.id(), 2, clock.get() + 60_000L);
    assertEquals(l.id(), r.id());
    assertEquals(2, r.gpus());
    assertEquals(clock.get() + 60_000L, r.expiryMs());
    assertEquals(1, table.size());
    assertEquals(2, table.liveGpus(app, node));
  }

  @Test
  void fewerWonBackLeaveTheRestEndingWhenTheLeaseWouldHave() {
    Lease l = table.grant(app, node, "", 3, 60_000L);
    clock.addAndGet(50_000L);
    Lease r = table.renewInPlace(l.id(), 1, clock.get() + 60_000L);
    assertEquals(1, r.gpus());
    assertEquals(3, table.liveGpus(app, node));
    clock.set(l.expiryMs()); // the old expiry: only the renewed GPU is left live
    assertEquals(1, table.liveGpus(app, node));
    // a release ends the soonest-ending GPUs first: the rest, not the renewed one
    clock.set(l.expiryMs() - 1);
    assertEquals(2, table.shrink(app, node, 2));
    assertEquals(1, table.liveGpus(app, node));
    assertEquals(l.id(), table.snapshot().get(0).id());
  }

  @Test
  void aLeaseThatEndedOrWasReleasedIsNotRenewed() {
    Lease l = table.grant(app, node, "", 2, 60_000L);
    clock.addAndGet(60_000L);
    assertNull(table.renewInPlace(l.id(), 2, clock.get() + 60_000L));
    assertNull(table.renewInPlace(12345L, 2, clock.get() + 60_000L));
    Lease m = table.grant(app, node, "", 2, 60_000L);
    table.shrink(app, node, 1);
    // more than it holds now: only what is left is renewed
    assertEquals(1, table.renewInPlace(m.id(), 2, clock.get() + 90_000L).gpus());
  }
}
