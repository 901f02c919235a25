package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerExitStatus;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Real RM + 2 NMs (4 GPUs each); the engine is off, so leases are set on the RM's own lease
 * table, and everything else (tryCommit gate, expiry policy, preemption, kill) is the real path.
 */
class LeaseEnforcementIT {
  private static ThemisMiniCluster mc;

  @BeforeAll
  static void up() throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(4);
    conf.setBoolean(ThemisSettings.ENGINE_ENABLED, false);
    conf.setLong(ThemisSettings.GRACE_PERIOD_MS, 2000);
    // TestAm has no Themis agent: enforce its leases as a Themis app's (StockAppPolicyIT
    // covers the default, hold)
    conf.set(ThemisSettings.STOCK_APP_POLICY, "preempt");
    mc = new ThemisMiniCluster("themis-leases", 2, conf);
  }

  @AfterAll
  static void down() {
    if (mc != null) {
      mc.close();
    }
  }

  @Test
  void gpuContainersOnlyWhereTheAppHoldsALease() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    TestAm am = TestAm.start(mc, "gated");
    am.ask(3, 1);
    List<Container> got = am.pollFor(3000);
    assertTrue(got.isEmpty(), "no lease yet, but got " + got);
    long rejected = s.rejectedGpuProposals() + s.filteredGpuAsks();
    assertTrue(rejected > 0, "GPU asks should have been filtered or refused");
    // the early filter is in place (on Hadoop 3.3 through the app's scheduling env)
    assertTrue(s.filteredGpuAsks() > 0, "ThemisPlacementAllocator filtered no GPU ask; tryCommit "
        + "refusals " + s.rejectedGpuProposals());

    // A non-GPU ask still schedules normally, even after many refused GPU proposals.
    am.ask(1, 0);
    got = am.pollFor(2000);
    assertEquals(1, got.size(), "non-GPU container: " + got);
    assertEquals(0, Gpus.of(got.get(0).getResource()));

    NodeId won = mc.nodeIds().get(1);
    s.leases().grant(am.appId, won, 2, 600_000);
    ThemisMiniCluster.waitFor("2 GPU containers", 15_000, () -> {
      try {
        am.poll();
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
      return am.gpuContainers().size() >= 2;
    });
    am.pollFor(1500); // the 3rd ask must stay pending: the lease covers 2 GPUs
    List<Container> gpu = am.gpuContainers();
    assertEquals(2, gpu.size(), "lease of 2 GPUs admits exactly 2 containers: " + gpu);
    for (Container c : gpu) {
      assertEquals(won, c.getNodeId(), "GPU container on a node the app did not win");
    }
    assertTrue(s.rejectedGpuProposals() + s.filteredGpuAsks() > rejected);
    System.out.println("tryCommit refusals " + s.rejectedGpuProposals() + ", filtered asks "
        + s.filteredGpuAsks() + ", GPU commits " + s.committedGpuProposals());
    assertTrue(s.committedGpuProposals() >= 2);
    am.finish();
  }

  @Test
  void leaseExpiryPreemptsThenKillsAfterGrace() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    TestAm am = TestAm.start(mc, "expiring");
    NodeId node = mc.nodeIds().get(0);
    s.leases().grant(am.appId, node, 1, 3000);
    am.ask(1, 1);
    ThemisMiniCluster.waitFor("GPU container", 10_000, () -> {
      try {
        am.poll();
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
      return am.gpuContainers().size() == 1;
    });
    Container c = am.gpuContainers().get(0);
    assertEquals(node, c.getNodeId());
    long t0 = System.currentTimeMillis();
    ThemisMiniCluster.waitFor("preemption message", 10_000, () -> {
      try {
        am.poll();
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
      return am.preemptAsked.contains(c.getId());
    });
    long preemptedAt = System.currentTimeMillis();
    assertTrue(am.completed.stream().noneMatch(st -> st.getContainerId().equals(c.getId())),
        "killed before the grace period");
    ThemisMiniCluster.waitFor("kill after grace", 15_000, () -> {
      try {
        am.poll();
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
      return am.completed.stream().anyMatch(st -> st.getContainerId().equals(c.getId()));
    });
    long killedAt = System.currentTimeMillis();
    ContainerStatus st = am.completed.stream()
        .filter(x -> x.getContainerId().equals(c.getId())).findFirst().orElseThrow();
    assertEquals(ContainerExitStatus.PREEMPTED, st.getExitStatus(), st.toString());
    assertTrue(killedAt - preemptedAt >= 1500,
        "grace period 2000 ms, but killed " + (killedAt - preemptedAt) + " ms after preemption");
    assertTrue(s.runtime().enforcer().preemptMarks() >= 1 && s.runtime().enforcer().killMarks() >= 1);
    assertEquals(0, s.leases().liveGpus(am.appId, node));
    assertFalse(s.leases().snapshot().stream().anyMatch(l -> l.app().equals(am.appId)),
        "lease removed after the grace period");
    // No lease any more: a new GPU ask stays pending.
    am.ask(1, 1);
    assertTrue(am.pollFor(2000).isEmpty());
    System.out.println("expiry->preempt " + (preemptedAt - t0) + " ms, preempt->kill "
        + (killedAt - preemptedAt) + " ms");
    am.finish();
  }
}
