package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.hadoop.yarn.api.records.ContainerExitStatus;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.junit.jupiter.api.Test;

/**
 * The stock-app policy (yarn.resourcemanager.themis.stock-app.*), real RM and NodeManager, no
 * engine (leases set on the RM's table): under {@code hold} (the default) the lease of an app
 * without a Themis agent renews while its GPU container runs, and the container is preempted
 * only once the lease reaches the maximum hold; under {@code preempt} it is preempted at the
 * first expiry, as a Themis app's would be.
 */
class StockAppPolicyIT {
  private static final long LEASE_MS = 1_500;
  private static final long MAX_HOLD_MS = 4_500;
  private static final long GRACE_MS = 300;

  private static ThemisMiniCluster cluster(String name, String policy) throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(2);
    conf.set(ThemisSettings.ENGINE_ENABLED, "false");
    conf.setLong(ThemisSettings.LEASE_DURATION_MS, LEASE_MS);
    conf.setLong(ThemisSettings.GRACE_PERIOD_MS, GRACE_MS);
    conf.setLong(ThemisSettings.MONITOR_INTERVAL_MS, 100);
    conf.setLong(ThemisSettings.STOCK_APP_MAX_HOLD_MS, MAX_HOLD_MS);
    if (policy != null) {
      conf.set(ThemisSettings.STOCK_APP_POLICY, policy);
    }
    return new ThemisMiniCluster(name, 1, conf);
  }

  /** A stock app holding a 2-GPU lease and running one 2-GPU container; returns its start. */
  private static long runOneContainer(ThemisMiniCluster mc, TestAm am, NodeId node)
      throws Exception {
    long granted = System.currentTimeMillis();
    mc.scheduler().leases().grant(am.appId, node, 2, LEASE_MS);
    am.ask(1, 2);
    ThemisMiniCluster.waitFor("the 2-GPU container", 10_000, () -> {
      am.pollUnchecked();
      return am.gpuContainers().size() == 1;
    });
    return granted;
  }

  /** Polls until the container ends; returns ms since {@code since}. */
  private static long untilPreempted(TestAm am, long since, long timeoutMs) throws Exception {
    ThemisMiniCluster.waitFor("the container preempted", timeoutMs, () -> {
      am.pollUnchecked();
      return !am.completed.isEmpty();
    });
    long at = System.currentTimeMillis() - since;
    ContainerStatus st = am.completed.get(0);
    assertEquals(ContainerExitStatus.PREEMPTED, st.getExitStatus(), st.toString());
    return at;
  }

  @Test
  void holdRenewsWhileTheContainerRunsUpToTheMaxHold() throws Exception {
    try (ThemisMiniCluster mc = cluster("themis-stock-hold", null)) {
      NodeId node = mc.nodeIds().get(0);
      ThemisRuntime rt = mc.scheduler().runtime();
      TestAm am = TestAm.start(mc, "stock-hold");
      long t0 = runOneContainer(mc, am, node);
      // two lease lengths later: still running, its lease renewed in place
      Thread.sleep(2 * LEASE_MS);
      am.pollUnchecked();
      assertTrue(am.completed.isEmpty(), "not preempted while within the max hold: "
          + am.completed);
      assertTrue(rt.enforcer().renewals() >= 1, "renewals " + rt.enforcer().renewals());
      assertEquals(2, mc.scheduler().leases().liveGpus(am.appId, node));
      assertEquals(0, rt.enforcer().preemptMarks());
      long at = untilPreempted(am, t0, MAX_HOLD_MS + 10_000);
      System.out.println("hold: preempted " + at + " ms after the grant (lease " + LEASE_MS
          + " ms, max hold " + MAX_HOLD_MS + " ms, grace " + GRACE_MS + " ms), renewals "
          + rt.enforcer().renewals());
      assertTrue(at >= MAX_HOLD_MS, "preempted before the max hold: " + at + " ms");
      assertTrue(rt.enforcer().preemptMarks() >= 1);
      am.finish();
    }
  }

  @Test
  void preemptEnforcesTheFirstExpiry() throws Exception {
    try (ThemisMiniCluster mc = cluster("themis-stock-preempt", "preempt")) {
      NodeId node = mc.nodeIds().get(0);
      TestAm am = TestAm.start(mc, "stock-preempt");
      long t0 = runOneContainer(mc, am, node);
      long at = untilPreempted(am, t0, 10_000);
      System.out.println("preempt: preempted " + at + " ms after the grant (lease " + LEASE_MS
          + " ms)");
      assertTrue(at >= LEASE_MS && at < MAX_HOLD_MS, "preempted at " + at + " ms");
      assertEquals(0, mc.scheduler().runtime().enforcer().renewals());
      am.finish();
    }
  }
}
