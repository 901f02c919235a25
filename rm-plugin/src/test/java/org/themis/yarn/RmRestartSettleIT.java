package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.themis.yarn.lease.Lease;

/**
 * No round before recovery has settled: after a restart the RM waits for the NodeManager of
 * a restored lease; that NM never comes back, so recovery settles at
 * {@code recovery-settle-ms}. Until then an app asking GPUs gets nothing although another
 * node has free GPUs; right after, the next round grants them. The lease on the missing
 * node is kept (it ends at its expiry as usual).
 */
class RmRestartSettleIT {
  // wide enough for the restart on a loaded 2-core machine: beside a mini-cluster, the RM's
  // restart, the other NM's resync and B's start took 5.8 s of an 8-s settle time, past
  // the window below (2026-12-02)
  private static final long SETTLE_MS = 20_000;
  private static ThemisMiniCluster mc;

  @BeforeAll
  static void up() throws Exception {
    File dir = Files.createTempDirectory("themis-settle").toFile();
    YarnConfiguration conf = RmRestartIT.restartConf(dir);
    conf.setLong(ThemisSettings.RECOVERY_SETTLE_MS, SETTLE_MS);
    mc = new ThemisMiniCluster("themis-settle", 2, conf);
    mc.awaitEngine();
  }

  @AfterAll
  static void down() {
    if (mc != null) {
      mc.close();
    }
  }

  @Test
  void roundsWaitForTheNodesOfRestoredLeasesAtMostTheSettleTime() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    // the NM that will not come back, and the one that will
    int goneIndex = 1;
    NodeId gone = mc.cluster.getNodeManager(goneIndex).getNMContext().getNodeId();
    NodeId stays = mc.cluster.getNodeManager(1 - goneIndex).getNMContext().getNodeId();
    TestAm a = TestAm.start(mc, "on-the-lost-node");

    // the NM first (stopping it while no RM answers waits for the RM for minutes); its
    // shutdown removes the node, which ends its leases (NodeLostIT), so the lease is granted
    // after that, as if the RM went down before it heard of the node's end
    mc.cluster.getNodeManager(goneIndex).stop();
    ThemisMiniCluster.waitFor("the stopped NM out of the scheduler", 30_000,
        () -> s.getSchedulerNode(gone) == null);
    Lease l = s.leases().grant(a.appId, gone, 1, 600_000);
    assertTrue(s.recovery().flush(5000));
    mc.cluster.stopResourceManager(0);
    long t0 = System.currentTimeMillis();
    mc.cluster.restartResourceManager(0);
    ThemisCapacityScheduler s2 = mc.scheduler();
    ThemisMiniCluster.waitFor("the other NM back", 60_000,
        () -> s2.getNodeTracker().getNode(stays) != null);
    TestAm b = TestAm.start(mc, "waits-for-recovery");
    b.ask(1, 1);
    // while recovery waits for the lost node: no round, no grant, the lease untouched
    long end = t0 + SETTLE_MS - 2500;
    long from = System.currentTimeMillis();
    boolean sawFree = false;
    while (System.currentTimeMillis() < end) {
      b.poll();
      assertFalse(s2.recovery().settled(), "settled before its timeout without the lost node");
      assertEquals(0, s2.runtime().driver().runOneRound(), "a round ran before recovery settled");
      assertEquals(0, s2.runtime().driver().rounds());
      sawFree |= s2.runtime().cluster().grantableGpus().getOrDefault(stays, 0L) == 2L;
      Thread.sleep(200);
    }
    assertTrue(sawFree, "GPUs of " + stays + " never seen free in the " + (end - from)
        + " ms between B's start (" + (from - t0) + " ms after the restart began) and "
        + "2.5 s before the settle time");
    assertTrue(b.gpuContainers().isEmpty(), "granted before recovery settled");
    ThemisMiniCluster.waitFor("recovery settled by its timeout", SETTLE_MS + 10_000,
        () -> s2.recovery().settled());
    long settled = System.currentTimeMillis() - t0;
    assertTrue(settled >= SETTLE_MS - 1000, "settled after " + settled + " ms");
    ThemisMiniCluster.waitFor("B's container after recovery settled", 15_000, () -> {
      try {
        b.poll();
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
      return b.gpuContainers().size() == 1;
    });
    long granted = System.currentTimeMillis() - t0;
    Container c = b.gpuContainers().get(0);
    assertEquals(stays, c.getNodeId());
    System.out.println("settle timeout: settled " + settled + " ms after the restart began, B's "
        + "container at " + granted + " ms (recovery-settle-ms " + SETTLE_MS + ")");
    boolean kept = false;
    for (Lease x : s2.leases().snapshot()) {
      kept |= x.id() == l.id() && x.node().equals(gone) && x.expiryMs() == l.expiryMs();
    }
    assertTrue(kept, "the lease on the lost node is kept until its expiry: "
        + s2.leases().snapshot());
    b.finish();
    a.finish();
  }
}
