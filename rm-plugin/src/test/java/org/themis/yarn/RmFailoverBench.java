package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.apache.hadoop.ha.HAServiceProtocol.HAServiceState;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerState;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.junit.jupiter.api.Test;
import org.themis.yarn.lease.Lease;

/**
 * Failover to first grant (bench/RESULTS.md): {@link RmHaIT}'s cluster (two RMs, real
 * ZooKeeper, ZKRMStateStore, embedded elector, real engine without a round delay). Each trial:
 * a holder app keeps both GPUs of one node busy with running containers; a new app has
 * registered and asks for one GPU right after the active RM is stopped; measured: new active
 * (its HA state ACTIVE) -> recovery settled, and -> the grant of the new active's first round
 * committed (the lease's grant time in its table); the holder's containers must keep running
 * (none restarted by the failover). The stopped RM is restarted as standby for the next trial.
 *
 * <p>Not part of the test suite (name matches neither *Test nor *IT). Run with
 * {@code mvn -q verify -pl rm-plugin -am -Dtest=RmFailoverBench
 * -Dsurefire.failIfNoSpecifiedTests=false -Dbench.trials=5}.
 */
class RmFailoverBench {
  @Test
  void failoverToFirstGrant() throws Exception {
    int trials = Integer.getInteger("bench.trials", 5);
    ZkTestServer zk = new ZkTestServer();
    File dir = Files.createTempDirectory("themis-ha-bench").toFile();
    YarnConfiguration conf = RmHaIT.haConf(dir, zk.address());
    conf.set(ThemisSettings.ENGINE_COMMAND, "-m themis.yarn.engine");
    RmHaIT.mc = new ThemisMiniCluster("themis-ha-bench", 2, 2, conf);
    ThemisMiniCluster mc = RmHaIT.mc;
    List<Long> settled = new ArrayList<>();
    List<Long> granted = new ArrayList<>();
    try {
      RmHaIT.n0 = mc.nodeIds().get(0);
      RmHaIT.n1 = mc.nodeIds().get(1);
      int active = RmHaIT.activeIndex(30_000);
      ThemisCapacityScheduler s = RmHaIT.scheduler(active);
      ThemisMiniCluster.waitFor("engine up", 60_000, () -> s.runtime().engine().pid() > 0);
      TestAm holder = TestAm.start(mc, "holder");
      s.leases().grant(holder.appId, RmHaIT.n0, 2, 600_000);
      s.runtime().agents().agentJoined(holder.appId.toString());
      holder.ask(2, 1);
      List<Container> running = RmHaIT.launch(holder, 2, RmHaIT.n0);
      for (int t = 0; t < trials; t++) {
        TestAm b = TestAm.start(mc, "waiter-" + t);
        int from = RmHaIT.activeIndex(30_000);
        mc.cluster.stopResourceManager(from);
        int to = RmHaIT.activeIndex(30_000);
        long tActive = System.currentTimeMillis();
        b.ask(1, 1);
        ThemisCapacityScheduler s1 = RmHaIT.scheduler(to);
        ThemisMiniCluster.waitFor("settled", 60_000, () -> s1.recovery().settled());
        long tSettled = System.currentTimeMillis();
        b.awaitGpuContainers(1, 60_000);
        long grantAt = -1;
        for (Lease l : s1.leases().snapshot()) {
          if (l.app().equals(b.appId)) {
            grantAt = l.grantedAtMs();
          }
        }
        assertTrue(grantAt > 0, "no lease of " + b.appId + " in " + s1.leases().snapshot());
        settled.add(tSettled - tActive);
        granted.add(grantAt - tActive);
        System.out.println("trial " + t + ": rm" + from + " -> rm" + to + ": active -> settled "
            + (tSettled - tActive) + " ms, active -> first grant committed "
            + (grantAt - tActive) + " ms");
        for (Container c : running) {
          assertEquals(ContainerState.RUNNING, mc.nmState(c.getId()), "holder restarted");
        }
        b.finish();
        mc.cluster.restartResourceManager(from);
        ThemisMiniCluster.waitFor("rm" + from + " standby", 60_000,
            () -> RmHaIT.haState(from) == HAServiceState.STANDBY);
      }
      holder.finish();
    } finally {
      mc.close();
      zk.close();
    }
    System.out.println("failover bench (" + trials + " trials): active -> settled "
        + stats(settled) + "; active -> first grant committed " + stats(granted));
  }

  /** Median, p95 (nearest rank) and maximum of {@code xs}. */
  static String stats(List<Long> xs) {
    List<Long> s = new ArrayList<>(xs);
    Collections.sort(s);
    long median = s.get(s.size() / 2);
    long p95 = s.get((int) Math.ceil(0.95 * s.size()) - 1);
    return "median " + median + " ms, p95 " + p95 + " ms, max " + s.get(s.size() - 1) + " ms";
  }
}
