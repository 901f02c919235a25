package org.themis.yarn.lease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.Collections;
import java.util.TreeSet;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.themis.yarn.ZkTestServer;

/** The ZooKeeper lease store against a real ZooKeeper server (no mock). */
class ZkLeaseStoreTest {
  private static ZkTestServer zk;
  private final ApplicationId a = ApplicationId.newInstance(7, 1);
  private final NodeId n1 = NodeId.newInstance("h1", 8041);

  @BeforeAll
  static void up() throws Exception {
    zk = new ZkTestServer();
  }

  @AfterAll
  static void down() {
    if (zk != null) {
      zk.close();
    }
  }

  private StoredLeases leases(int gpus) {
    return new StoredLeases(
        Arrays.asList(new Lease(1, a, n1, gpus, 10, 20, Lease.State.ACTIVE, 0)), 2,
        new TreeSet<>(Collections.singleton(a)), 30);
  }

  private ZkLeaseStore store(String path) throws Exception {
    return new ZkLeaseStore(new Configuration(), zk.address(), path);
  }

  @Test
  void saveAndLoadUnderANewPath() throws Exception {
    try (ZkLeaseStore s = store("/themis/c1/leases")) {
      assertNull(s.load(), "nothing stored yet (the node is created)");
      assertNull(s.read());
      s.save(leases(2));
      assertEquals(2, s.read().leases().get(0).gpus());
      assertTrue(s.describe().equals("zookeeper " + zk.address() + "/themis/c1/leases"),
          s.describe());
    }
    try (ZkLeaseStore s = store("/themis/c1/leases")) {
      StoredLeases r = s.load();
      assertNotNull(r);
      assertEquals(LeaseStoreTest.keys(leases(2).leases()), LeaseStoreTest.keys(r.leases()));
      assertEquals(leases(2).agentApps(), r.agentApps());
      assertEquals(2, r.nextId());
    }
  }

  @Test
  void anRmThatLoadedEarlierIsFencedOnceAnotherLoaded() throws Exception {
    try (ZkLeaseStore old = store("/themis/c2/leases");
         ZkLeaseStore active = store("/themis/c2/leases")) {
      assertNull(old.load());
      old.save(leases(1));
      // the new active loads (and claims): the old one's next write is refused
      assertEquals(1, active.load().leases().get(0).gpus());
      LeaseStore.Fenced e = assertThrows(LeaseStore.Fenced.class, () -> old.save(leases(3)));
      assertTrue(e.getMessage().contains("another ResourceManager"), e.getMessage());
      active.save(leases(4));
      assertEquals(4, active.read().leases().get(0).gpus());
      assertEquals(4, old.read().leases().get(0).gpus(), "read does not claim");
      active.save(leases(5));
    }
  }

  @Test
  void aWriterThatIsFencedStopsWriting() throws Exception {
    try (ZkLeaseStore old = store("/themis/c3/leases");
         ZkLeaseStore active = store("/themis/c3/leases")) {
      old.load();
      LeaseStoreWriter w = new LeaseStoreWriter(old, () -> leases(7));
      w.start();
      w.changed();
      assertTrue(w.flush(10_000));
      active.load();
      w.changed();
      long end = System.currentTimeMillis() + 10_000;
      while (!w.fenced() && System.currentTimeMillis() < end) {
        Thread.sleep(20);
      }
      assertTrue(w.fenced());
      assertEquals(7, active.read().leases().get(0).gpus());
      active.save(leases(8));
      assertEquals(8, active.read().leases().get(0).gpus());
    }
  }
}
