package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerState;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.themis.yarn.engine.EngineSupervisor;
import org.themis.yarn.lease.Lease;

/**
 * The engine killed at the same moment as the RM (docs/yarn.md, "Restart and HA"): a real RM
 * with work-preserving recovery (FileSystemRMStateStore), two real NodeManagers with 2 GPUs
 * each running real {@code sleep} containers, the real engine, slowed to 2 s per round so
 * that a round can be caught in flight. While the engine works on a round, its process gets
 * SIGKILL and the RM is stopped right after (in one JVM the closest to the RM dying: see
 * {@link RmHaIT}); a new RM then starts with a fresh engine. Everything is checked on the
 * server side: the engine processes under this JVM, the lease tables, the containers on the
 * NodeManagers. The engine killed alone while the RM keeps running is
 * {@code EngineBridgeIT.engineKilledMidRoundIsRestartedWithoutDoubleGrant}.
 */
class RmEngineKillIT {
  private static final long LEASE_MS = 600_000;
  private static final int GPUS_PER_NODE = 2;
  private static ThemisMiniCluster mc;
  private static NodeId n0;
  private static NodeId n1;

  @BeforeAll
  static void up() throws Exception {
    File dir = Files.createTempDirectory("themis-engine-kill").toFile();
    YarnConfiguration conf = RmRestartIT.restartConf(dir);
    conf.set(ThemisSettings.ENGINE_COMMAND, "-m themis.yarn.engine --round-delay-s 2.0");
    conf.setLong(ThemisSettings.ROUND_TIMEOUT_MS, 20_000);
    conf.setLong(ThemisSettings.ENGINE_RESTART_BACKOFF_MS, 200);
    mc = new ThemisMiniCluster("themis-engine-kill", 2, conf);
    n0 = mc.nodeIds().get(0);
    n1 = mc.nodeIds().get(1);
    mc.awaitEngine();
  }

  @AfterAll
  static void down() {
    if (mc != null) {
      mc.close();
    }
  }

  @Test
  void engineKilledWithTheRmMidRoundLeavesNoOrphanAndGrantsNothingTwice() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    Overlap overlap = new Overlap();
    overlap.start();
    try {
      // A (an agent app) runs on both GPUs of n0 and on one of n1; its asks are all served.
      TestAm a = TestAm.start(mc, "holder");
      s.runtime().agents().agentJoined(a.appId.toString());
      s.leases().grant(a.appId, n0, 2, LEASE_MS);
      Lease aOnN1 = s.leases().grant(a.appId, n1, 1, LEASE_MS);
      a.ask(3, 1);
      List<Container> aRunning = launch(a, 3);
      assertEquals(2, on(aRunning, n0).size(), aRunning.toString());
      assertEquals(1, on(aRunning, n1).size(), aRunning.toString());
      a.unask(3, 1);
      a.poll();
      // B asks for 3 GPUs; one is free (on n1): a round starts and sleeps in the engine.
      TestAm b = TestAm.start(mc, "waiter");
      b.ask(3, 1);
      b.poll();
      EngineSupervisor e = s.runtime().engine();
      long roundsBefore = s.runtime().driver().rounds();
      s.runtime().driver().signal();
      ThemisMiniCluster.waitFor("a round in flight in the engine", 20_000, e::inRound);
      Set<String> before = keys(s.leases().snapshot());

      // SIGKILL to the engine and the RM stopped at the same moment
      long oldPid = e.pid();
      assertTrue(oldPid > 0);
      ProcessHandle old = ProcessHandle.of(oldPid).orElseThrow();
      assertEquals(Set.of(oldPid), enginePids(), "one engine before the kill");
      assertTrue(old.destroyForcibly());
      mc.cluster.stopResourceManager(0);
      old.onExit().get(10, TimeUnit.SECONDS);
      assertFalse(ProcessHandle.of(oldPid).map(ProcessHandle::isAlive).orElse(false),
          "the killed engine " + oldPid + " still runs");
      assertEquals(Set.of(), enginePids(), "an engine outlived its stopped RM");
      assertEquals(-1, e.pid());
      // the round in flight was abandoned: no round completed, B got no lease
      assertEquals(roundsBefore, s.runtime().driver().rounds());
      assertEquals(0, leasedGpus(s, b));
      assertEquals(before, keys(s.leases().snapshot()), "the stopped RM changed its leases");

      ThemisCapacityScheduler s2 = restart();
      EngineSupervisor e2 = s2.runtime().engine();
      long newPid = e2.pid();
      assertNotEquals(oldPid, newPid);
      assertEquals(Set.of(newPid), enginePids(), "exactly the new RM's engine runs");
      // the same leases (ids, expiries, states); A's containers kept running and are the RM's
      assertEquals(before, keys(s2.leases().snapshot()));
      for (Container ct : aRunning) {
        assertEquals(ContainerState.RUNNING, mc.nmState(ct.getId()), ct.getId() + " on its NM");
      }
      ThemisMiniCluster.waitFor("A's containers recovered by the new RM", 10_000,
          () -> s2.usedGpus(a.appId, n0) == 2 && s2.usedGpus(a.appId, n1) == 1);

      // B re-sends its asks to the new RM (after recovery settled; rounds run every 60 s
      // here): the next round gives B the free GPU on n1, once
      ThemisMiniCluster.waitFor("B's asks at the new RM", 20_000, () -> {
        b.pollUnchecked();
        return pendingGpus(s2, b) == 3;
      });
      s2.runtime().driver().signal();
      List<Container> bRunning = new ArrayList<>(launch(b, 1));
      assertEquals(n1, bRunning.get(0).getNodeId());
      assertTrue(b.pollFor(2000).isEmpty(), "B got a GPU in use by A");
      assertEquals(0L, s2.runtime().cluster().grantableGpus().get(n0));
      assertEquals(0L, s2.runtime().cluster().grantableGpus().get(n1));
      assertEquals(1, leasedGpus(s2, b));

      // A's lease on n1 expires: notice, grace, kill; only then B gets that GPU
      ContainerId aN1 = on(aRunning, n1).get(0).getId();
      assertNotNull(s2.leases().renew(aOnN1.id(), 1, s2.leases().now() + 500));
      ThemisMiniCluster.waitFor("A's container on n1 killed after the grace period", 30_000,
          () -> mc.nmState(aN1) != ContainerState.RUNNING
              && s2.runtime().cluster().grantableGpus().get(n1) == 1L);
      assertEquals(1, b.gpuContainers().size(), "B got a GPU while A's container ran on it");
      // the round that offers the freed GPU: woken here, as the test's rounds run every 60 s
      // (the round woken by the kill itself can still see the GPU in use on the node)
      s2.runtime().driver().signal();
      bRunning.addAll(launch(b, 2));
      assertEquals(n1, bRunning.get(1).getNodeId());

      // A finishes: B gets its third GPU on n0. Woken here once A's GPUs are back, as above:
      // the round woken by A's container ends can still see them in use (on a loaded machine
      // it did, and the next round came 60 s later)
      a.finish();
      ThemisMiniCluster.waitFor("A's GPUs on n0 free", 30_000,
          () -> s2.runtime().cluster().grantableGpus().getOrDefault(n0, 0L) >= 1L);
      s2.runtime().driver().signal();
      bRunning.addAll(launch(b, 3));
      assertEquals(n0, bRunning.get(2).getNodeId());
      assertTrue(b.pollFor(1000).isEmpty(), "B got more than it asked for");
      assertEquals(3, b.gpuContainers().size());
      assertEquals(3, leasedGpus(s2, b), "B's leases: " + s2.leases().snapshot());
      for (NodeId n : new NodeId[] {n0, n1}) {
        assertTrue(s2.leases().liveGpusOnNode(n) <= GPUS_PER_NODE, "over-leased " + n);
      }
      // no engine restarted in the new RM, none left over from the old one
      assertEquals(1, e2.starts());
      assertEquals(Set.of(newPid), enginePids());
      b.finish();
      ThemisMiniCluster.waitFor("leases of the test gone", 20_000,
          () -> s2.leases().size() == 0);
    } finally {
      overlap.stop();
    }
    assertTrue(overlap.samples > 0);
    assertEquals(List.of(), new ArrayList<>(overlap.violations),
        "more GPUs in use on a node than it has");
  }

  // ------------------------------------------------------------------ helpers

  /** PIDs of the engine processes under this JVM (any RM's, any incarnation). */
  private static Set<Long> enginePids() {
    Set<Long> out = new TreeSet<>();
    ProcessHandle.current().descendants().forEach(p -> {
      if (p.isAlive() && p.info().commandLine().orElse("").contains("themis.yarn.engine")) {
        out.add(p.pid());
      }
    });
    return out;
  }

  /**
   * Samples the NodeManagers all along: the GPUs of the RUNNING containers on a node never
   * exceed its GPUs (no container of one app ever runs on a GPU another app's still uses).
   */
  private static final class Overlap implements Runnable {
    final ConcurrentLinkedQueue<String> violations = new ConcurrentLinkedQueue<>();
    volatile long samples;
    private volatile boolean running = true;
    private final Thread thread = new Thread(this, "gpu-overlap-check");

    void start() {
      thread.setDaemon(true);
      thread.start();
    }

    void stop() throws InterruptedException {
      running = false;
      thread.join(5000);
    }

    @Override
    public void run() {
      while (running) {
        for (int i = 0; i < 2; i++) {
          long used = 0;
          List<ContainerId> ids = new ArrayList<>();
          for (org.apache.hadoop.yarn.server.nodemanager.containermanager.container.Container c
              : mc.cluster.getNodeManager(i).getNMContext().getContainers().values()) {
            long g = Gpus.of(c.getResource());
            if (g > 0 && c.cloneAndGetContainerStatus().getState() == ContainerState.RUNNING) {
              used += g;
              ids.add(c.getContainerId());
            }
          }
          if (used > GPUS_PER_NODE) {
            violations.add("NM " + i + ": " + used + " GPUs in use by " + ids);
          }
        }
        samples++;
        try {
          Thread.sleep(50);
        } catch (InterruptedException e) {
          return;
        }
      }
    }
  }

  /** Restarts the RM; returns the new scheduler once its recovery settled and its engine is up. */
  private static ThemisCapacityScheduler restart() throws Exception {
    mc.cluster.restartResourceManager(0);
    ThemisCapacityScheduler s = mc.scheduler();
    ThemisMiniCluster.waitFor("NodeManagers back", 60_000,
        () -> s.getNodeTracker().nodeCount() == 2);
    ThemisMiniCluster.waitFor("lease recovery settled", 60_000, () -> s.recovery().settled());
    mc.awaitEngine();
    return s;
  }

  /** Waits until {@code am} holds {@code n} GPU containers and runs the new ones. */
  private static List<Container> launch(TestAm am, int n) throws Exception {
    int had = am.gpuContainers().size();
    try {
      ThemisMiniCluster.waitFor(am.appId + ": " + n + " GPU container(s)", 60_000, () -> {
        am.pollUnchecked();
        return am.gpuContainers().size() >= n;
      });
    } catch (AssertionError err) {
      ThemisCapacityScheduler s = mc.scheduler();
      throw new AssertionError(err.getMessage() + "; leases " + s.leases().snapshot()
          + "; grantable " + s.runtime().cluster().grantableGpus() + "; rounds " + s.runtime().driver().rounds()
          + "; last view " + s.runtime().cluster().lastView(), err);
    }
    List<Container> all = am.gpuContainers();
    List<Container> out = new ArrayList<>(all.subList(had, all.size()));
    for (Container ct : out) {
      am.launch(mc, ct, "sleep 600");
    }
    for (Container ct : out) {
      ThemisMiniCluster.waitFor(ct.getId() + " running", 30_000,
          () -> mc.nmState(ct.getId()) == ContainerState.RUNNING);
    }
    return out;
  }

  private static List<Container> on(List<Container> cs, NodeId node) {
    List<Container> out = new ArrayList<>();
    for (Container ct : cs) {
      if (ct.getNodeId().equals(node)) {
        out.add(ct);
      }
    }
    return out;
  }

  /** GPUs {@code am} asks for and has not been allocated, as the scheduler sees them. */
  private static long pendingGpus(ThemisCapacityScheduler s, TestAm am) {
    org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerApplication<
        org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerApp>
        sa = s.getSchedulerApplications().get(am.appId);
    return sa == null || sa.getCurrentAppAttempt() == null ? 0
        : Gpus.of(sa.getCurrentAppAttempt().getAppAttemptResourceUsage().getPending());
  }

  /** GPUs under live leases of {@code am}, all nodes. */
  private static long leasedGpus(ThemisCapacityScheduler s, TestAm am) {
    return s.leases().liveGpus(am.appId, n0) + s.leases().liveGpus(am.appId, n1);
  }

  private static String key(Lease l) {
    return l.id() + "/" + l.app() + "/" + l.node() + "/" + l.gpus() + "/" + l.expiryMs() + "/"
        + l.state();
  }

  private static Set<String> keys(List<Lease> ls) {
    Set<String> out = new TreeSet<>();
    for (Lease l : ls) {
      out.add(key(l));
    }
    return out;
  }
}
