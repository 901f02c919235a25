package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.ha.HAServiceProtocol.HAServiceState;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerState;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.resourcemanager.ResourceManager;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.themis.yarn.lease.Lease;

/**
 * RM restart to first grant (bench/RESULTS.md): {@link RmRestartIT}'s cluster (one RM,
 * work-preserving recovery, FileSystemRMStateStore and the file lease store, or with
 * {@code -Dbench.store=zk} ZKRMStateStore and the ZooKeeper lease store on a real ZooKeeper
 * server as {@link RmRestartZkIT}; 2 NodeManagers x 2 GPUs over RPC; the real engine), rounds
 * every 500 ms as in {@link RmFailoverBench}. A holder app keeps both GPUs of one node busy
 * with running containers under a lease; its AM heartbeats every 200 ms on a thread of its own
 * throughout. Each trial: a new app registers; the RM is stopped; the new app asks for one GPU
 * while the RM is down; a new RM is started in its place. Measured: restart begun -> RM ready
 * (its start returned, HA state ACTIVE, its RPC servers serving), and from RM ready: to lease
 * recovery settled, to the new engine's agents' endpoint served (the engine is launched when
 * the scheduler starts, inside the RM's start), and to the grant of the new app's lease
 * committed (its grant time in the lease table); and the holder AM's heartbeat gap (the longest
 * time between two answered heartbeats from its last one before the restart began to its first
 * one answered by the new RM, after re-registering). The holder's containers must keep
 * running on their NodeManager with their original start time (none restarted by the
 * restart) and the holder must get no preemption notice and no completed container.
 *
 * <p>Not part of the test suite (name matches neither *Test nor *IT). Run with
 * {@code mvn -q verify -pl rm-plugin -am -Dtest=RmRestartBench
 * -Dsurefire.failIfNoSpecifiedTests=false -Dbench.trials=5} (add {@code -Dbench.store=zk}).
 */
class RmRestartBench {
  private static final long LEASE_MS = 600_000;

  @Test
  @Timeout(value = 14, unit = TimeUnit.MINUTES) // under the fork's 15 minutes
  void restartToFirstGrant() throws Exception {
    int trials = Integer.getInteger("bench.trials", 5);
    boolean zkStore = "zk".equals(System.getProperty("bench.store", "fs"));
    File dir = Files.createTempDirectory("themis-restart-bench").toFile();
    YarnConfiguration conf = RmRestartIT.restartConf(dir);
    // periodic rounds as in RmFailoverBench (RmRestartIT's rounds run only when woken)
    conf.setLong(ThemisSettings.ROUND_INTERVAL_MS, 500);
    ZkTestServer zk = null;
    if (zkStore) {
      zk = new ZkTestServer();
      RmRestartZkIT.useZk(conf, zk.address(), "restart-bench");
    }
    List<Long> stopped = new ArrayList<>();
    List<Long> ready = new ArrayList<>();
    List<Long> settled = new ArrayList<>();
    List<Long> granted = new ArrayList<>();
    List<Long> amGaps = new ArrayList<>();
    List<Long> engineUp = new ArrayList<>();
    Heartbeat hb = null;
    try {
      RmRestartIT.start("themis-restart-bench", conf, zkStore ? "zookeeper " : "fs ");
      ThemisMiniCluster mc = RmRestartIT.mc;
      NodeId n0 = RmRestartIT.n0;
      NodeId n1 = RmRestartIT.n1;
      ThemisCapacityScheduler s = mc.scheduler();
      assertTrue(s.recovery().storeName().startsWith(zkStore ? "zookeeper " : "fs "),
          s.recovery().storeName());
      // the holder: both GPUs of n0 under a lease, two running containers, asks all served.
      // Until YARN has placed its containers a round counts its asks as demand and could lease
      // it n1 as well: n1 is leased to a blocker app meanwhile, which then finishes.
      TestAm blocker = TestAm.start(mc, "blocker");
      s.leases().grant(blocker.appId, n1, 2, LEASE_MS);
      TestAm holder = TestAm.start(mc, "holder");
      s.leases().grant(holder.appId, n0, 2, LEASE_MS);
      s.runtime().agents().agentJoined(holder.appId.toString());
      holder.ask(2, 1);
      List<Container> running = RmRestartIT.launch(holder, 2, n0);
      holder.unask(2, 1);
      holder.poll();
      blocker.finish();
      ThemisMiniCluster.waitFor("n1 free", 20_000, () -> s.leases().liveGpusOnNode(n1) == 0);
      Map<ContainerId, Long> startedAt = new HashMap<>();
      for (Container c : running) {
        startedAt.put(c.getId(), nmContainer(mc, c.getId()).getContainerStartTime());
      }
      Heartbeat beat = new Heartbeat(holder);
      hb = beat;
      beat.thread.start();
      for (int t = 0; t < trials; t++) {
        TestAm b = TestAm.start(mc, "waiter-" + t);
        long tBegin = System.currentTimeMillis();
        mc.cluster.stopResourceManager(0);
        long tStopped = System.currentTimeMillis();
        b.ask(1, 1); // sent with its first heartbeat to the new RM
        mc.cluster.restartResourceManager(0);
        ResourceManager rm = mc.cluster.getResourceManager(0);
        long tReady = System.currentTimeMillis();
        assertEquals(HAServiceState.ACTIVE, rm.getRMContext().getHAServiceState());
        ThemisCapacityScheduler s1 = mc.scheduler();
        // sampled every 10 ms: recovery settled, the new engine's agents' endpoint served
        long[] tSettled = {0};
        long[] tEngine = {0};
        Thread watch = new Thread(() -> {
          while (tSettled[0] == 0 || tEngine[0] == 0) {
            if (tSettled[0] == 0 && s1.recovery().settled()) {
              tSettled[0] = System.currentTimeMillis();
            }
            if (tEngine[0] == 0 && !s1.runtime().engine().agentAddress().isEmpty()) {
              tEngine[0] = System.currentTimeMillis();
            }
            try {
              Thread.sleep(10);
            } catch (InterruptedException e) {
              return;
            }
          }
        }, "restart-watch");
        watch.start();
        b.awaitGpuContainers(1, 60_000);
        watch.join(60_000);
        assertTrue(tSettled[0] > 0, "recovery not settled");
        assertTrue(tEngine[0] > 0, "engine not up");
        Lease lease = null;
        for (Lease l : s1.leases().snapshot()) {
          if (l.app().equals(b.appId)) {
            lease = l;
          }
        }
        assertNotNull(lease, "no lease of " + b.appId + " in " + s1.leases().snapshot());
        assertEquals(n1, b.gpuContainers().get(0).getNodeId());
        ThemisMiniCluster.waitFor("holder's heartbeat answered by the new RM", 30_000,
            () -> {
              if (beat.error != null) {
                throw new AssertionError("holder's heartbeat failed", beat.error);
              }
              return beat.lastOkMs() > tReady;
            });
        long gap = beat.gapAcross(tBegin, tReady);
        // the holder's containers: still the same processes, the RM's again
        for (Container c : running) {
          assertEquals(ContainerState.RUNNING, mc.nmState(c.getId()), "holder stopped");
          assertEquals(startedAt.get(c.getId()).longValue(),
              nmContainer(mc, c.getId()).getContainerStartTime(), c.getId() + " restarted");
        }
        ThemisMiniCluster.waitFor("holder's containers recovered by the new RM", 10_000,
            () -> s1.usedGpus(holder.appId, n0) == 2);
        for (NodeId n : new NodeId[] {n0, n1}) {
          assertTrue(s1.leases().liveGpusOnNode(n) <= 2, "over-leased " + n + ": "
              + s1.leases().snapshot());
        }
        stopped.add(tStopped - tBegin);
        ready.add(tReady - tBegin);
        settled.add(tSettled[0] - tReady);
        granted.add(lease.grantedAtMs() - tReady);
        amGaps.add(gap);
        engineUp.add(tEngine[0] - tReady);
        System.out.println("trial " + t + ": stop " + (tStopped - tBegin)
            + " ms, restart begun -> RM ready " + (tReady - tBegin) + " ms, ready -> settled "
            + (tSettled[0] - tReady) + " ms, ready -> engine up " + (tEngine[0] - tReady)
            + " ms, ready -> first grant committed "
            + (lease.grantedAtMs() - tReady) + " ms, holder's AM heartbeat gap " + gap
            + " ms, holder's containers restarted 0");
        b.finish();
        ThemisMiniCluster.waitFor("waiter's lease ended", 20_000, () -> {
          for (Lease l : s1.leases().snapshot()) {
            if (l.app().equals(b.appId)) {
              return false;
            }
          }
          return true;
        });
      }
      hb.stop();
      assertEquals(null, hb.error, "holder's heartbeat failed");
      assertTrue(holder.preemptAsked.isEmpty(), "holder preempted: " + holder.preemptAsked);
      assertTrue(holder.completed.isEmpty(), "holder's containers ended: " + holder.completed);
      holder.finish();
    } finally {
      if (hb != null) {
        hb.stop();
      }
      if (RmRestartIT.mc != null) {
        RmRestartIT.mc.close();
        RmRestartIT.mc = null;
      }
      if (zk != null) {
        zk.close();
      }
    }
    System.out.println("restart bench (" + (zkStore ? "zk" : "fs") + " store, " + trials
        + " trials): stop " + RmFailoverBench.stats(stopped) + "; restart begun -> RM ready "
        + RmFailoverBench.stats(ready) + "; ready -> settled " + RmFailoverBench.stats(settled)
        + "; ready -> engine up " + RmFailoverBench.stats(engineUp)
        + "; ready -> first grant committed " + RmFailoverBench.stats(granted)
        + "; holder's AM heartbeat gap " + RmFailoverBench.stats(amGaps)
        + "; holder's containers restarted 0");
  }

  private static org.apache.hadoop.yarn.server.nodemanager.containermanager.container.Container
      nmContainer(ThemisMiniCluster mc, ContainerId id) {
    org.apache.hadoop.yarn.server.nodemanager.containermanager.container.Container c =
        mc.nmContainer(id);
    if (c == null) {
      throw new AssertionError(id + " on no NodeManager");
    }
    return c;
  }

  /**
   * The holder's AM: allocate every 200 ms on its own thread (an RM call blocks while the RM
   * is down and re-registers with the new one), recording when each call was answered.
   */
  private static final class Heartbeat implements Runnable {
    final Thread thread = new Thread(this, "holder-heartbeat");
    private final TestAm am;
    private final List<Long> answered = new ArrayList<>();
    private volatile boolean running = true;
    volatile Throwable error;

    Heartbeat(TestAm am) {
      this.am = am;
    }

    @Override
    public void run() {
      while (running) {
        try {
          am.poll();
          synchronized (this) {
            answered.add(System.currentTimeMillis());
          }
          Thread.sleep(200);
        } catch (InterruptedException e) {
          return;
        } catch (Throwable e) {
          error = e;
          return;
        }
      }
    }

    synchronized long lastOkMs() {
      return answered.isEmpty() ? 0 : answered.get(answered.size() - 1);
    }

    /**
     * The longest time between two consecutive answers from the last one before {@code begun}
     * to the first one after {@code ready} (a call answered by the RM while it stops, and a
     * call that waits for the new RM, both fall in between).
     */
    synchronized long gapAcross(long begun, long ready) {
      long prev = 0;
      long gap = 0;
      for (long a : answered) {
        if (a >= begun && prev > 0) {
          gap = Math.max(gap, a - prev);
        }
        if (a > ready) {
          return gap;
        }
        prev = a;
      }
      throw new AssertionError("no heartbeat answered after " + ready);
    }

    void stop() throws InterruptedException {
      running = false;
      thread.join(30_000);
    }
  }
}
