package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.hadoop.yarn.api.records.ContainerExitStatus;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * A node YARN declares LOST (the NodeManager liveness monitor's EXPIRE event, as after
 * {@code yarn.nm.liveness-monitor.expiry-interval-ms} without a heartbeat): real RM + 2 NMs
 * (2 GPUs each), the engine off, leases set on the RM's table. The node's leases end with it
 * (docs/yarn.md, "Faults"), leases elsewhere stay, and when the NodeManager registers again
 * the app cannot start GPU containers there on its old lease.
 */
class NodeLostIT {
  private static ThemisMiniCluster mc;

  @BeforeAll
  static void up() throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(2);
    conf.setBoolean(ThemisSettings.ENGINE_ENABLED, false);
    mc = new ThemisMiniCluster("themis-node-lost", 2, conf);
  }

  @AfterAll
  static void down() {
    if (mc != null) {
      mc.close();
    }
  }

  @Test
  void aLostNodesLeasesEndAndItsContainersEndAsAborted() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    NodeId lost = mc.nodeIds().get(0);
    NodeId kept = mc.nodeIds().get(1);
    TestAm am = TestAm.start(mc, "on-lost-node");
    s.leases().grant(am.appId, lost, 2, 600_000);
    s.leases().grant(am.appId, kept, 1, 600_000);
    // one GPU more than leased stays pending: an app still asking keeps its leases when a
    // container ends (AgentGateway.gpuContainerEnded), so only the node's removal ends them
    am.ask(4, 1);
    am.awaitGpuContainers(3, 15_000);

    mc.expireNode(lost);
    // (not "the node out of the scheduler": the NodeManager heart-beats on, is told to
    // resync and is back within a heartbeat, often before a poll could see it gone)
    ThemisMiniCluster.waitFor("a lost node's leases to end with it", 15_000,
        () -> s.leases().liveGpusOnNode(lost) == 0);
    assertEquals(1, s.leases().liveGpus(am.appId, kept), "leases elsewhere stay");
    ThemisMiniCluster.waitFor("the AM told of its 2 lost containers", 15_000, () -> {
      am.pollUnchecked();
      return am.completed.stream()
          .filter(c -> c.getExitStatus() == ContainerExitStatus.ABORTED).count() == 2;
    });
    for (ContainerStatus c : am.completed) {
      assertTrue(c.getDiagnostics().contains("lost"), c.getDiagnostics());
    }

    // the NodeManager heart-beats on, is told to resync and registers again: no old lease
    // lets the app place GPU containers there
    ThemisMiniCluster.waitFor("the node back", 60_000, () -> s.getSchedulerNode(lost) != null);
    am.ask(2, 1);
    assertTrue(am.pollFor(2000).isEmpty(), "no lease on the returned node");
    assertEquals(0, s.leases().liveGpusOnNode(lost));
  }
}
