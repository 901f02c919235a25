package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;
import java.util.Set;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.junit.jupiter.api.Test;
import org.themis.yarn.status.ThemisMetrics;

/**
 * The metrics2 source in a real RM (2 NMs x 2 GPUs, the real Python engine): after an app's
 * GPU ask has been decided by a round, the RM's platform MBean server serves
 * {@code Hadoop:service=ResourceManager,name=ThemisMetrics} (what {@code /jmx} prints) with
 * rounds >= 1, leased + free = total GPUs, the app's rho as the top-1 record, and stopping the
 * scheduler removes the source while the RM's own metrics stay.
 */
class ThemisMetricsIT {
  private static final String BEAN = "Hadoop:service=ResourceManager,name=ThemisMetrics";
  private static final String PATTERN = "Hadoop:service=*,name=ThemisMetrics";

  @Test
  void metricsAreServedThroughJmxAndUnregisteredOnStop() throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(2);
    conf.set(ThemisSettings.PYTHON_EXECUTABLE,
        ThemisMiniCluster.testPython());
    conf.setLong(ThemisSettings.ROUND_INTERVAL_MS, 300);
    conf.setLong(ThemisSettings.LEASE_DURATION_MS, 600_000);
    conf.setInt(ThemisSettings.METRICS_TOP_APPS, 3);
    MBeanServer mbs = ManagementFactory.getPlatformMBeanServer();
    try (ThemisMiniCluster mc = new ThemisMiniCluster("themis-metrics", 2, conf)) {
      // In one JVM the RM and NMs share the metrics system, whose service name is the last
      // daemon's to start (NodeManager here); an RM process registers it as BEAN.
      Set<ObjectName> found = mbs.queryNames(new ObjectName(PATTERN), null);
      assertEquals(1, found.size(), PATTERN + " registered when the scheduler starts: " + found);
      ObjectName name = found.iterator().next();
      TestAm am = TestAm.start(mc, "metrics");
      am.ask(1, 1);
      ThemisMiniCluster.waitFor("GPU container granted by a round", 60_000, () -> {
        try {
          am.poll();
        } catch (Exception e) {
          throw new RuntimeException(e);
        }
        return am.gpuContainers().size() == 1;
      });
      long leasedInTable = mc.scheduler().leases().liveGpus(am.appId, am.gpuContainers().get(0)
          .getNodeId());
      assertEquals(1, leasedInTable);
      // JMX values are a snapshot cached up to the metrics period (10 s): poll
      ThemisMiniCluster.waitFor("metrics show the round and the lease", 30_000,
          () -> num(mbs, name, "Rounds") >= 1 && num(mbs, name, "GpusLeased") == 1);
      assertEquals(4, num(mbs, name, "GpusTotal"));
      assertEquals(3, num(mbs, name, "GpusFree"), "4 GPUs, 1 leased (and used by the container)");
      assertEquals(1, num(mbs, name, "LeasesActive"));
      assertEquals(0, num(mbs, name, "AppsWaiting"), "its one GPU ask granted");
      assertEquals(0, num(mbs, name, "LeasesExpiringSoon"), "10-minute lease, warning 60 s");
      assertTrue(num(mbs, name, "GrantsApplied") >= 1);
      assertTrue(num(mbs, name, "RoundTimeNumOps") >= 1);
      assertTrue(num(mbs, name, "EngineTimeNumOps") >= 1);
      assertEquals(1, num(mbs, name, "EngineStarts"));
      assertEquals(0, num(mbs, name, "EngineRestarts"));
      for (String cause : ThemisMetrics.REJECT_CAUSES) {
        assertEquals(0, num(mbs, name, "BidsRejected" + camel(cause)), cause);
      }
      // no node labels: no ThemisPartition records (PartitionsIT has them), so the app (no
      // agent: the engine's default rho 1.0) is the top-1 record, tagged
      assertThrows(javax.management.AttributeNotFoundException.class,
          () -> mbs.getAttribute(name, "tag.Partition.1"));
      assertEquals(am.appId.toString(), mbs.getAttribute(name, "tag.App.1"));
      assertEquals("1", mbs.getAttribute(name, "tag.Rank.1"));
      assertEquals(1.0, ((Number) mbs.getAttribute(name, "Rho.1")).doubleValue(), 1e-9);
      System.out.println("ThemisMetrics: Rounds=" + num(mbs, name, "Rounds")
          + " RoundTimeAvgTime=" + mbs.getAttribute(name, "RoundTimeAvgTime")
          + " EngineTimeAvgTime=" + mbs.getAttribute(name, "EngineTimeAvgTime")
          + " GpusLeased/Free/Total=" + num(mbs, name, "GpusLeased") + "/"
          + num(mbs, name, "GpusFree") + "/" + num(mbs, name, "GpusTotal"));
      am.finish();

      Set<ObjectName> rmOwn = mbs.queryNames(
          new ObjectName("Hadoop:service=*,name=JvmMetrics"), null);
      assertFalse(rmOwn.isEmpty(), "the RM's JvmMetrics are registered");
      mc.scheduler().stop();
      assertFalse(mbs.isRegistered(name), name + " unregistered when the scheduler stops");
      assertTrue(mbs.queryNames(new ObjectName(PATTERN), null).isEmpty());
      assertFalse(mc.scheduler().runtime().metrics().registered());
      for (ObjectName q : rmOwn) {
        assertTrue(mbs.isRegistered(q), q + " (the RM's metrics system) is still up");
      }
    }
  }

  private static long num(MBeanServer mbs, ObjectName name, String attr) {
    try {
      return ((Number) mbs.getAttribute(name, attr)).longValue();
    } catch (javax.management.JMException e) {
      throw new AssertionError("cannot read " + attr + " of " + name + ": " + e, e);
    }
  }

  private static String camel(String snake) {
    StringBuilder sb = new StringBuilder();
    for (String part : snake.split("_")) {
      sb.append(Character.toUpperCase(part.charAt(0))).append(part.substring(1));
    }
    return sb.toString();
  }
}
