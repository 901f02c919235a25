package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerState;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Freed GPUs go back at once: real RM + 1 NM with 2 GPUs + the real Python engine. App A holds
 * both GPUs under 10-minute leases; app B asks; when A's container ends (A asks for no more
 * GPUs and has no agent), when A finishes, or when an agent app releases GPUs, B's container
 * follows within about a second, also when A's containers run on the NodeManager and outlive
 * the RM's kill (their GPUs are free only once the NodeManager reports them gone), and when a
 * node that YARN declared lost registers again with its GPUs free. The periodic
 * round is set to 60 s, so only the freed-GPU triggers can explain a short wait. Latencies are
 * printed (client side: from the allocate call that carried the release / the unregister to
 * B's allocate that returned the container).
 */
class FreedGpusIT {
  private static final long LEASE_MS = 600_000;
  private static ThemisMiniCluster mc;
  private static NodeId node;

  @BeforeAll
  static void up() throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(2);
    conf.set(ThemisSettings.PYTHON_EXECUTABLE,
        ThemisMiniCluster.testPython());
    conf.setLong(ThemisSettings.LEASE_DURATION_MS, LEASE_MS);
    conf.setLong(ThemisSettings.ROUND_INTERVAL_MS, 60_000);
    conf.setLong(ThemisSettings.FREED_ROUND_DELAY_MS, 200);
    mc = new ThemisMiniCluster("themis-freed", 1, conf);
    node = mc.nodeIds().get(0);
    mc.awaitEngine();
  }

  @AfterAll
  static void down() {
    if (mc != null) {
      mc.close();
    }
  }

  @BeforeEach
  void noLeases() throws InterruptedException {
    ThemisMiniCluster.waitFor("leases of the previous test gone", 15_000,
        () -> mc.scheduler().leases().liveGpusOnNode(node) == 0);
  }

  /** A holds both GPUs (lease set on the RM's table, 10 min) and runs 2 one-GPU containers. */
  private static TestAm holder(String name) throws Exception {
    TestAm a = TestAm.start(mc, name);
    mc.scheduler().leases().grant(a.appId, node, 2, LEASE_MS);
    a.ask(2, 1);
    a.awaitGpuContainers(2, 15_000);
    return a;
  }

  /** B asks {@code n} GPUs while none is free: nothing for a while. */
  private static TestAm waiter(String name, int n) throws Exception {
    TestAm b = TestAm.start(mc, name);
    b.ask(n, 1);
    assertTrue(b.pollFor(1500).isEmpty(), "no GPU is free yet");
    return b;
  }

  @Test
  void containerEndOfAnAppWithoutAgentFreesItsGpus() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    TestAm a = holder("holder-a");
    TestAm b = waiter("waiter-b", 1);
    long rounds = s.runtime().driver().rounds();
    Container done = a.gpuContainers().get(0);
    a.release(done.getId());
    a.pollUnchecked(); // carries the release; the RM completes the container inside this call
    long t0 = System.currentTimeMillis();
    b.awaitGpuContainers(1, 10_000);
    long latency = System.currentTimeMillis() - t0;
    System.out.println("container end -> next grant: B's container after " + latency
        + " ms (lease " + LEASE_MS + " ms, freed-round-delay 200 ms, round interval 60 s)");
    assertEquals(node, b.gpuContainers().get(0).getNodeId());
    assertEquals(1, s.leases().liveGpus(a.appId, node), "A keeps the lease of its running GPU");
    assertTrue(s.runtime().driver().rounds() > rounds);
    a.finish();
    b.finish();
  }

  @Test
  void finishedAppFreesItsGpusAndABurstMakesOneRound() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    TestAm a = holder("holder-finishing");
    TestAm b = waiter("waiter-two", 2);
    long rounds = s.runtime().driver().rounds();
    long t0 = System.currentTimeMillis();
    a.finish(); // both containers end and the app is removed: one burst
    b.awaitGpuContainers(2, 10_000);
    long latency = System.currentTimeMillis() - t0;
    System.out.println("app finish -> next grant: B's 2 containers after " + latency + " ms, "
        + (s.runtime().driver().rounds() - rounds) + " round(s)");
    assertEquals(0, s.leases().liveGpus(a.appId, node), "a finished app holds no lease");
    assertEquals(1, s.runtime().driver().rounds() - rounds, "a burst of completions makes one round");
    b.finish();
  }

  /**
   * A's two containers run on the NodeManager and ignore SIGTERM (the NodeManager's SIGKILL
   * follows 250 ms later), so when A finishes, the node keeps their GPUs until its NodeManager
   * reports them gone, in a heartbeat after the round that A's finish triggered: that report
   * must trigger a round of its own.
   */
  @Test
  void gpusOfKilledRunningContainersGoBackWhenTheirNodeReportsThemGone() throws Exception {
    TestAm a = holder("holder-running");
    TestAm b = null;
    boolean aFinished = false;
    try {
      for (Container ct : a.gpuContainers()) {
        a.launch(mc, ct, "trap '' TERM; while true; do sleep 1; done");
      }
      for (Container ct : a.gpuContainers()) {
        ThemisMiniCluster.waitFor(ct.getId() + " running on its NM", 30_000,
            () -> mc.nmState(ct.getId()) == ContainerState.RUNNING);
      }
      b = waiter("waiter-after-kill", 2);
      long t0 = System.currentTimeMillis();
      aFinished = true;
      a.finish();
      b.awaitGpuContainers(2, 10_000);
      System.out.println("app finish (containers running, SIGTERM ignored) -> next grant: B's "
          + "2 containers after " + (System.currentTimeMillis() - t0) + " ms");
      for (Container ct : a.gpuContainers()) {
        assertTrue(mc.nmState(ct.getId()) != ContainerState.RUNNING, ct.getId() + " still runs");
      }
    } finally { // (the next test waits for every lease to be gone)
      if (!aFinished) {
        a.finish();
      }
      if (b != null) {
        b.finish();
      }
    }
  }

  /**
   * A node YARN declared lost registers again: its GPUs reach the waiting app within the
   * freed-GPU delay, not at the periodic round. Two triggers can serve it, the round that the
   * node's ended leases trigger (200 ms after its loss) and the one its registration triggers;
   * here the NodeManager (100-ms heartbeats) is back before the first runs, so this case also
   * passes without the registration trigger (282 ms), which serves nodes that return later.
   */
  @Test
  void gpusOfANodeThatRegistersAgainGoBackAtOnce() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    TestAm a = TestAm.start(mc, "holder-of-a-lost-node");
    s.leases().grant(a.appId, node, 2, LEASE_MS); // leases only: no container ends later
    TestAm b = waiter("waiter-for-the-node", 2);
    try {
      long rounds = s.runtime().driver().rounds();
      // YARN declares the node lost: its leases end with it; the NodeManager heart-beats on,
      // is told to resync and registers again, with both GPUs free
      mc.expireNode(node);
      ThemisMiniCluster.waitFor("the node's leases gone", 15_000,
          () -> s.leases().liveGpusOnNode(node) == 0);
      ThemisMiniCluster.waitFor("the node registered again", 15_000, () -> {
        FiCaSchedulerNode n = s.getNode(node);
        return n != null && Gpus.of(n.getUnallocatedResource()) == 2;
      });
      long t0 = System.currentTimeMillis();
      b.awaitGpuContainers(2, 10_000);
      System.out.println("node registered again -> next grant: B's 2 containers after "
          + (System.currentTimeMillis() - t0) + " ms (" + (s.runtime().driver().rounds() - rounds)
          + " rounds since the node was lost)");
    } finally {
      a.finish();
      b.finish();
    }
  }

  @Test
  void anAgentAppKeepsItsLeaseUntilItReleasesGpus() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    ThemisRuntime rt = s.runtime();
    TestAm a = holder("agent-app");
    rt.agents().agentJoined(a.appId.toString()); // as the engine reports an AM's registration
    TestAm b = waiter("waiter-c", 1);
    a.release(a.gpuContainers().get(0).getId());
    a.pollUnchecked();
    // Its AM may start its next job on the lease: the GPU stays A's.
    assertTrue(b.pollFor(2000).isEmpty(), "the agent app's lease was kept");
    assertEquals(2, s.leases().liveGpus(a.appId, node));
    String reply = rt.agents().releaseGpus(a.appId.toString(), "[\"" + node + "/0\"]");
    assertTrue(reply.contains("\"released\":1"), reply);
    long t0 = System.currentTimeMillis();
    b.awaitGpuContainers(1, 10_000);
    System.out.println("ReleaseGpus -> next grant: B's container after "
        + (System.currentTimeMillis() - t0) + " ms");
    assertEquals(1, s.leases().liveGpus(a.appId, node));
    String bad = rt.agents().releaseGpus(a.appId.toString(), "[\"nowhere:1/0\"]");
    assertTrue(bad.contains("\"ok\":false") && bad.contains("nowhere:1/0"), bad);
    a.finish();
    b.finish();
  }
}
