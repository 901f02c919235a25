package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Set;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerExitStatus;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.resourcemanager.monitor.SchedulingMonitorManager;
import org.apache.hadoop.yarn.server.resourcemanager.monitor.capacity.ProportionalCapacityPreemptionPolicy;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Leases are enforced whatever the scheduling-monitor keys say: a real RM whose yarn-site.xml
 * does not list {@link LeaseExpiryPolicy} (monitor keys unset, or only CapacityScheduler's own
 * preemption policy) still preempts a GPU container at lease expiry and kills it after the
 * grace period. The engine is off; the lease is set on the RM's lease table.
 */
class EnforcementWithoutMonitorIT {

  @ParameterizedTest(name = "monitors: {0}")
  @ValueSource(strings = {"unset", "capacity-preemption-only"})
  void leaseExpiryPreemptsThenKillsWithoutTheMonitorPolicy(String monitors) throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(2);
    conf.unset(YarnConfiguration.RM_SCHEDULER_ENABLE_MONITORS);
    conf.unset(YarnConfiguration.RM_SCHEDULER_MONITOR_POLICIES);
    if (monitors.equals("capacity-preemption-only")) {
      conf.setBoolean(YarnConfiguration.RM_SCHEDULER_ENABLE_MONITORS, true);
      conf.set(YarnConfiguration.RM_SCHEDULER_MONITOR_POLICIES,
          ProportionalCapacityPreemptionPolicy.class.getName());
    }
    conf.setBoolean(ThemisSettings.ENGINE_ENABLED, false);
    conf.setLong(ThemisSettings.GRACE_PERIOD_MS, 2000);
    // TestAm has no Themis agent: enforce its leases as a Themis app's (StockAppPolicyIT
    // covers the default, hold)
    conf.set(ThemisSettings.STOCK_APP_POLICY, "preempt");
    try (ThemisMiniCluster mc = new ThemisMiniCluster("themis-no-monitor-" + monitors, 1, conf)) {
      ThemisCapacityScheduler s = mc.scheduler();
      SchedulingMonitorManager monitorsRunning = s.getSchedulingMonitorManager();
      if (monitors.equals("unset")) {
        assertTrue(monitorsRunning.isRSMEmpty(), "no scheduling monitor configured");
      } else {
        assertTrue(monitorsRunning.isSameConfiguredPolicies(
            Set.of(ProportionalCapacityPreemptionPolicy.class.getName())),
            "only CapacityScheduler's preemption policy runs as a monitor");
      }

      TestAm am = TestAm.start(mc, "no-monitor");
      NodeId node = mc.nodeIds().get(0);
      s.leases().grant(am.appId, node, 1, 3000);
      am.ask(1, 1);
      ThemisMiniCluster.waitFor("GPU container", 15_000, () -> {
        am.pollUnchecked();
        return am.gpuContainers().size() == 1;
      });
      Container c = am.gpuContainers().get(0);
      long t0 = System.currentTimeMillis();
      ThemisMiniCluster.waitFor("preemption message at lease expiry", 15_000, () -> {
        am.pollUnchecked();
        return am.preemptAsked.contains(c.getId());
      });
      long preemptedAt = System.currentTimeMillis();
      ThemisMiniCluster.waitFor("kill after the grace period", 15_000, () -> {
        am.pollUnchecked();
        return am.completed.stream().anyMatch(st -> st.getContainerId().equals(c.getId()));
      });
      long killedAt = System.currentTimeMillis();
      ContainerStatus st = am.completed.stream()
          .filter(x -> x.getContainerId().equals(c.getId())).findFirst().orElseThrow();
      assertEquals(ContainerExitStatus.PREEMPTED, st.getExitStatus(), st.toString());
      assertTrue(killedAt - preemptedAt >= 1500,
          "grace period 2000 ms, but killed " + (killedAt - preemptedAt) + " ms after preemption");
      assertTrue(s.runtime().enforcer().preemptMarks() >= 1 && s.runtime().enforcer().killMarks() >= 1);
      assertTrue(s.runtime().enforcer().enforcementPasses() > 0);
      System.out.println("[" + monitors + "] allocation->preempt " + (preemptedAt - t0)
          + " ms (lease of 3000 ms granted before the allocation), preempt->kill " + (killedAt - preemptedAt)
          + " ms (grace 2000 ms)");
      am.finish();
    }
  }
}
