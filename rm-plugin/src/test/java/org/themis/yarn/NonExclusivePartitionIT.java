package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
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
import org.themis.yarn.round.AppGpus;

/**
 * A non-exclusive partition on a real RM (docs/yarn.md, "Partitions"): 2 NMs of 4 GPUs + the
 * real Python engine; the first NM carries the NON-exclusive label {@code shared}, the other is
 * in the default partition. Queue root.a may access {@code shared} (its default node-label
 * expression), root.b may not (default partition only). Stock apps under {@code preempt}, with
 * 8-s leases.
 *
 * <p>(a) b's app asks for more GPUs than the default partition has: Themis leases it the idle
 * GPUs of the shared node too, and CapacityScheduler really places its containers there (its
 * IGNORE_PARTITION_EXCLUSIVITY pass). (b) a's app (partition shared) then asks for the shared
 * node's GPUs, all held by b: at the expiry of b's leases those GPUs go to a, not back to b,
 * which still asks. The RM refuses a grant of a's app on the default node.
 */
class NonExclusivePartitionIT {
  private static final long LEASE_MS = 8_000;
  private static ThemisMiniCluster mc;
  private static NodeId shared;
  private static NodeId plain;

  @BeforeAll
  static void up() throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(4);
    conf.set(ThemisSettings.PYTHON_EXECUTABLE, ThemisMiniCluster.testPython());
    conf.setLong(ThemisSettings.LEASE_DURATION_MS, LEASE_MS);
    conf.setLong(ThemisSettings.GRACE_PERIOD_MS, 1000);
    conf.setLong(ThemisSettings.ROUND_INTERVAL_MS, 1000);
    conf.set(ThemisSettings.STOCK_APP_POLICY, "preempt");
    conf.setBoolean(YarnConfiguration.NODE_LABELS_ENABLED, true);
    File store = Files.createTempDirectory("themis-node-labels").toFile();
    store.deleteOnExit();
    conf.set(YarnConfiguration.FS_NODE_LABELS_STORE_ROOT_DIR, store.toURI().toString());
    String q = "yarn.scheduler.capacity.root.";
    conf.set(q + "queues", "a,b");
    conf.set(q + "accessible-node-labels.shared.capacity", "100");
    conf.set(q + "a.capacity", "50");
    conf.set(q + "b.capacity", "50");
    conf.set(q + "a.accessible-node-labels", "shared");
    conf.set(q + "a.accessible-node-labels.shared.capacity", "100");
    conf.set(q + "a.accessible-node-labels.shared.maximum-capacity", "100");
    conf.set(q + "a.default-node-label-expression", "shared");
    conf.set(q + "b.accessible-node-labels", " "); // the default partition only
    for (String leaf : new String[] {"a", "b"}) {
      conf.set(q + leaf + ".maximum-capacity", "100");
      conf.set(q + leaf + ".user-limit-factor", "4");
    }
    mc = new ThemisMiniCluster("themis-non-exclusive", 2, conf);
    // `yarn rmadmin -addToClusterNodeLabels "shared(exclusive=false)"` and
    // `-replaceLabelsOnNode` on the first NM
    shared = mc.nodes().get(0).getNodeID();
    plain = mc.nodes().get(1).getNodeID();
    mc.label(shared, "shared", false);
    mc.awaitEngine();
  }

  @AfterAll
  static void down() {
    if (mc != null) {
      mc.close();
    }
  }

  @Test
  void idleGpusLendToDefaultAppsAndComeBackAtExpiry() throws Exception {
    ThemisRuntime rt = mc.scheduler().runtime();
    TestAm a = TestAm.start(mc, "user-a", "a");
    TestAm b = TestAm.start(mc, "user-b", "b");
    // The RM refuses a grant outside the app's partition whatever the engine says: a (no
    // asks yet: its queue's default expression, shared) on the default node's free GPUs
    assertEquals("shared", partitionOf(a), "a without asks: its queue's default expression");
    assertEquals("", partitionOf(b));
    long refused = rt.driver().grantsRefused();
    assertEquals(Long.valueOf(4), rt.cluster().grantableGpus().get(plain));
    assertEquals(0, rt.driver().applyGrants("{\"grants\":[{\"app_id\":\"" + a.appId
        + "\",\"node_id\":\"" + plain + "\",\"gpus\":1}]}"), "grant refused");
    assertEquals(refused + 1, rt.driver().grantsRefused());
    assertTrue(mc.scheduler().leases().snapshot().isEmpty());

    // (a) b (default partition) asks for 14: the default node's 4 and the shared node's 4 idle
    b.ask(14, 1);
    b.awaitAsked(mc, 14);
    rt.driver().signal();
    b.awaitGpuContainers(8, LEASE_MS - 2000);
    assertEquals(4, b.gpusOn(plain), "b's containers on the default node");
    assertEquals(4, b.gpusOn(shared), "YARN placed b's containers on the shared node's idle GPUs");
    long onShared = 0;
    for (Lease l : mc.scheduler().leases().snapshot()) {
      assertEquals(b.appId, l.app(), l.toString());
      assertEquals(l.node().equals(shared) ? "shared" : "", l.partition(), l.toString());
      onShared += l.node().equals(shared) ? l.gpus() : 0;
    }
    assertEquals(4, onShared, "b's leases on the shared node");

    // (b) a (partition shared) asks for the shared node's 4 GPUs, all held by b, which still
    // asks for 6 more (more than the default node has): at the expiry of b's leases (preempted,
    // killed after the grace period) the shared node's GPUs go to a first, b gets the default
    // node's again
    a.ask(4, 1);
    a.awaitAsked(mc, 4);
    a.awaitGpuContainers(4, LEASE_MS + 20_000);
    for (Container c : a.gpuContainers()) {
      assertEquals(shared, c.getNodeId(), "a's container outside partition shared");
    }
    b.awaitGpuContainers(12, 10_000);
    assertEquals(0, b.gpusOn(shared), "b's containers left the shared node");
    assertEquals(4, b.gpusOn(plain), "b holds the default node again");
    long now = mc.scheduler().leases().now();
    for (Lease l : mc.scheduler().leases().snapshot()) {
      if (l.isLive(now)) {
        assertEquals(l.node().equals(shared) ? a.appId : b.appId, l.app(), l.toString());
      }
    }
    a.finish();
    b.finish();
  }

  private static String partitionOf(TestAm am) {
    for (AppGpus g : mc.scheduler().runtime().cluster().appGpus()) {
      if (g.app().equals(am.appId)) {
        return g.partition();
      }
    }
    throw new AssertionError(am.appId + " not among the scheduler's apps");
  }
}
