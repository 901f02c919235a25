package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.hadoop.ha.HAServiceProtocol.HAServiceState;
import org.apache.hadoop.service.Service;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerState;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.resourcemanager.ResourceManager;
import org.apache.hadoop.yarn.server.resourcemanager.recovery.ZKRMStateStore;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.themis.yarn.lease.Lease;
import org.themis.yarn.lease.ZkLeaseStore;

/**
 * RM HA with automatic failover (docs/yarn.md, "Restart and HA"): two ResourceManagers with
 * the plugin (ids rm0, rm1), a real ZooKeeper server, ZKRMStateStore and the lease store in
 * ZooKeeper, the embedded leader elector; two real NodeManagers (2 GPUs each) running real
 * {@code sleep} containers over RPC; the real engine, slowed to 2 s per round so that a round
 * can be caught in flight.
 *
 * <p>"Killing" the active RM: {@code MiniYARNCluster.stopResourceManager}, i.e.
 * {@code ResourceManager.stop()} without a prior transition to standby. In one JVM this is the
 * closest to kill -9: the RM's services (RPC servers, scheduler, round driver, engine) go
 * away at once and nothing hands over. It differs from kill -9 in two ways, both in the
 * standby's favour only for timing: its elector closes its ZooKeeper session (the standby is
 * elected at once instead of after {@code yarn.resourcemanager.zk-timeout-ms}), and the lease
 * writer flushes its pending write (a crash can lose it; {@link RmRestartIT} covers a lost
 * record through the reconciliation rule).
 */
class RmHaIT {
  private static final long LEASE_MS = 600_000;
  private static final String[] IDS = {"rm0", "rm1"};
  static ZkTestServer zk;
  static ThemisMiniCluster mc;
  static NodeId n0;
  static NodeId n1;
  private static final int[] AGENT_PORTS = new int[2];

  static YarnConfiguration haConf(File dir, String zkAddress) {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(2);
    conf.set(ThemisSettings.PYTHON_EXECUTABLE, ThemisMiniCluster.testPython());
    // every round sleeps 2 s in the engine: the test stops the active RM in mid-round
    conf.set(ThemisSettings.ENGINE_COMMAND, "-m themis.yarn.engine --round-delay-s 2.0");
    conf.setLong(ThemisSettings.LEASE_DURATION_MS, LEASE_MS);
    conf.setLong(ThemisSettings.GRACE_PERIOD_MS, 3000);
    conf.setLong(ThemisSettings.ROUND_INTERVAL_MS, 500);
    conf.setLong(ThemisSettings.RECOVERY_SETTLE_MS, 30_000);
    conf.setBoolean(YarnConfiguration.RECOVERY_ENABLED, true);
    conf.setBoolean(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_ENABLED, true);
    conf.setLong(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_SCHEDULING_WAIT_MS, 1000);
    conf.set(YarnConfiguration.RM_STORE, ZKRMStateStore.class.getName());
    conf.set(ZkLeaseStore.ZK_ADDRESS, zkAddress);
    conf.set(YarnConfiguration.RM_ZK_ADDRESS, zkAddress); // the elector's key
    conf.set(YarnConfiguration.RM_CLUSTER_ID, "themis-ha");
    conf.set(YarnConfiguration.FS_RM_STATE_STORE_URI, new File(dir, "unused").toURI().toString());
    // HA: two RMs, automatic failover with the elector embedded in the RM
    conf.setBoolean(YarnConfiguration.RM_HA_ENABLED, true);
    conf.set(YarnConfiguration.RM_HA_IDS, String.join(",", IDS));
    conf.setBoolean(YarnConfiguration.AUTO_FAILOVER_ENABLED, true);
    conf.setBoolean(YarnConfiguration.AUTO_FAILOVER_EMBEDDED, true);
    conf.setLong(YarnConfiguration.RM_ZK_TIMEOUT_MS, 4000);
    // clients, AMs and NMs fail over to the other RM within a fraction of a second
    conf.setLong(YarnConfiguration.CLIENT_FAILOVER_SLEEPTIME_BASE_MS, 100);
    conf.setLong(YarnConfiguration.CLIENT_FAILOVER_SLEEPTIME_MAX_MS, 1000);
    conf.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_RETRY_INTERVAL_MS, 200);
    conf.setLong(YarnConfiguration.NM_RESOURCEMANAGER_CONNECT_RETRY_INTERVAL_MS, 200);
    conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_USE_RPC, true);
    conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, true);
    // each RM id its own free ports, the agents' endpoint included (agent-port.<rm-id>)
    for (int i = 0; i < IDS.length; i++) {
      for (String key : new String[] {YarnConfiguration.RM_ADDRESS,
          YarnConfiguration.RM_SCHEDULER_ADDRESS, YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS,
          YarnConfiguration.RM_ADMIN_ADDRESS, YarnConfiguration.RM_WEBAPP_ADDRESS,
          YarnConfiguration.RM_WEBAPP_HTTPS_ADDRESS}) {
        conf.set(key + "." + IDS[i], "localhost:" + RmRestartIT.freePort());
      }
      AGENT_PORTS[i] = RmRestartIT.freePort();
      conf.setInt(ThemisSettings.AGENT_PORT + "." + IDS[i], AGENT_PORTS[i]);
    }
    return conf;
  }

  @BeforeAll
  static void up() throws Exception {
    zk = new ZkTestServer();
    File dir = Files.createTempDirectory("themis-ha").toFile();
    mc = new ThemisMiniCluster("themis-ha", 2, 2, haConf(dir, zk.address()));
    n0 = mc.nodeIds().get(0);
    n1 = mc.nodeIds().get(1);
    ThemisMiniCluster.waitFor("engine up on the active RM", 60_000,
        () -> scheduler(activeIndex(10_000)).runtime().engine().pid() > 0);
  }

  @AfterAll
  static void down() throws Exception {
    if (mc != null) {
      mc.close();
    }
    if (zk != null) {
      zk.close();
    }
  }

  @Test
  void failoverMidRoundRecoversLeasesGrantsOnceAndFailsBack() throws Exception {
    int first = activeIndex(30_000);
    int second = 1 - first;
    ThemisCapacityScheduler s0 = scheduler(first);
    assertTrue(s0.runtime().running());
    assertTrue(s0.recovery().storeName().startsWith("zookeeper "), s0.recovery().storeName());
    // the engine process runs before it listens: wait for the endpoint
    ThemisMiniCluster.waitFor("the active RM's agents' endpoint", 60_000,
        () -> listening(AGENT_PORTS[first]));
    assertStandbyIdle(second);

    // A holds both GPUs of n0 with two running containers; its AM speaks to the endpoint.
    TestAm a = TestAm.start(mc, "holder");
    s0.leases().grant(a.appId, n0, 2, LEASE_MS);
    s0.runtime().agents().agentJoined(a.appId.toString());
    a.ask(2, 1);
    List<Container> aRunning = launch(a, 2, n0);
    assertTrue(s0.recovery().flush(5000), "lease store write");
    Set<String> before = keys(s0.leases().snapshot());

    // B asks for a GPU: n1 is free, so a round offers it; the engine holds the round 2 s and
    // the active RM is stopped while the round is in flight.
    TestAm b = TestAm.start(mc, "waiter");
    b.ask(1, 1);
    b.pollUnchecked();
    long grants0 = s0.runtime().driver().grantsApplied();
    ThemisMiniCluster.waitFor("a round in flight", 20_000, () -> s0.runtime().engine().inRound());
    long t0 = System.currentTimeMillis();
    mc.cluster.stopResourceManager(first);
    long stopMs = System.currentTimeMillis() - t0;
    long oldGrants = s0.runtime().driver().grantsApplied() - grants0;
    assertFalse(s0.runtime().running());
    assertEquals(-1, s0.runtime().engine().pid(), "the stopped RM's engine is gone");
    assertFalse(listening(AGENT_PORTS[first]), "the stopped RM's agents' endpoint is closed");
    // the round was abandoned: the stop interrupted the engine call before its reply
    assertEquals(0, oldGrants, "the stopped RM applied a grant of the round in flight (stop "
        + "took " + stopMs + " ms, the round 2 s)");

    // failover: the standby is elected, recovers the leases from ZooKeeper and settles
    assertEquals(second, activeIndex(30_000));
    long tActive = System.currentTimeMillis();
    ThemisCapacityScheduler s1 = scheduler(second);
    ThemisMiniCluster.waitFor("lease recovery settled on the new active", 60_000,
        () -> s1.recovery().settled());
    long tSettled = System.currentTimeMillis();
    assertTrue(s1.recovery().restoredLeases() >= 1);
    assertTrue(keys(s1.leases().snapshot()).containsAll(before),
        "lost in the failover: " + before + " -> " + keys(s1.leases().snapshot()));
    assertTrue(s1.runtime().agents().hasAgent(a.appId), "A's agent is remembered");
    ThemisMiniCluster.waitFor("new active's agents' endpoint", 60_000,
        () -> listening(AGENT_PORTS[second]));
    for (Container ct : aRunning) {
      assertEquals(ContainerState.RUNNING, mc.nmState(ct.getId()), ct.getId() + " on its NM");
    }
    // the abandoned round's grant is made once, by the new active's own round
    ThemisMiniCluster.waitFor("B's GPU container from the new active", 60_000, () -> {
      b.pollUnchecked();
      return b.gpuContainers().size() == 1;
    });
    long tGrant = System.currentTimeMillis();
    System.out.println("failover: stop " + stopMs + " ms; stop began -> new active "
        + (tActive - t0) + " ms; active -> settled " + (tSettled - tActive)
        + " ms; active -> B's container " + (tGrant - tActive) + " ms");
    assertTrue(b.pollFor(2000).isEmpty(), "B got a second container");
    assertEquals(1L, liveGpus(s1, b.appId), "B's leases: " + s1.leases().snapshot());
    assertEquals(n1, b.gpuContainers().get(0).getNodeId());
    assertEquals(2L, s1.usedGpus(a.appId, n0), "A's containers are the new active's");
    assertOverLeasedNowhere(s1);
    List<Container> bRunning = launch(b, 1, n1);

    // the first RM comes back as standby and holds nothing
    mc.cluster.restartResourceManager(first);
    ThemisMiniCluster.waitFor("rm" + first + " standby", 60_000,
        () -> haState(first) == HAServiceState.STANDBY);
    assertStandbyIdle(first);
    assertTrue(s1.recovery().flush(5000), "lease store write");
    Set<String> before2 = keys(s1.leases().snapshot());

    // second failover, back to the first RM
    long t1 = System.currentTimeMillis();
    mc.cluster.stopResourceManager(second);
    assertEquals(first, activeIndex(30_000));
    long tActive2 = System.currentTimeMillis();
    ThemisCapacityScheduler s2 = scheduler(first);
    assertTrue(s2 != s0, "a fresh scheduler on the restarted RM");
    ThemisMiniCluster.waitFor("lease recovery settled after the failback", 60_000,
        () -> s2.recovery().settled());
    System.out.println("failback: stop -> new active " + (tActive2 - t1) + " ms; active -> "
        + "settled " + (System.currentTimeMillis() - tActive2) + " ms");
    assertEquals(before2, keys(s2.leases().snapshot()), "leases after the failback");
    for (Container ct : concat(aRunning, bRunning)) {
      assertEquals(ContainerState.RUNNING, mc.nmState(ct.getId()), ct.getId() + " on its NM");
    }
    ThemisMiniCluster.waitFor("A's and B's containers recovered", 20_000,
        () -> s2.usedGpus(a.appId, n0) == 2 && s2.usedGpus(b.appId, n1) == 1);
    assertEquals(0L, s2.runtime().cluster().grantableGpus().get(n0));
    assertOverLeasedNowhere(s2);
    a.pollUnchecked();
    b.pollUnchecked();
    assertTrue(a.preemptAsked.isEmpty() && a.completed.isEmpty(), a.completed.toString());
    assertTrue(b.preemptAsked.isEmpty() && b.completed.isEmpty(), b.completed.toString());
    a.finish();
    b.finish();
    ThemisMiniCluster.waitFor("leases of finished apps end", 30_000,
        () -> s2.leases().size() == 0);
  }

  // ------------------------------------------------------------------ helpers

  /** A standby RM: its scheduler is initialised but never started; nothing of Themis runs. */
  private static void assertStandbyIdle(int i) {
    assertEquals(HAServiceState.STANDBY, haState(i));
    ThemisCapacityScheduler s = scheduler(i);
    assertEquals(Service.STATE.INITED, s.getServiceState());
    assertFalse(s.runtime().running(), "standby: no enforcement, no round driver");
    assertEquals(0, s.leases().size(), "standby holds leases");
    assertEquals(0, s.runtime().driver().rounds());
    assertEquals(0, s.runtime().engine().starts(), "standby started an engine");
    assertEquals("none", s.recovery().storeName(), "standby opened the lease store");
    if (listening(AGENT_PORTS[i])) {
      // The port was free when the test chose it; another process may have bound it since
      // (any bind to port 0). Only a Themis engine there is a standby's agents' endpoint.
      String owner = listenerOwner(AGENT_PORTS[i]);
      System.out.println("rm" + i + "'s agents' port " + AGENT_PORTS[i] + " is bound by " + owner);
      assertFalse(owner.isEmpty() || owner.contains("themis.yarn.engine"),
          "standby rm" + i + "'s agents' port " + AGENT_PORTS[i] + " serves: "
          + (owner.isEmpty() ? "(owner unknown)" : owner));
    }
  }

  /**
   * The process listening on TCP {@code port} of this host, from /proc (Linux): "pid P, parent
   * Q: command line"; empty when unknown.
   */
  static String listenerOwner(int port) {
    Set<String> inodes = new TreeSet<>();
    for (String table : new String[] {"/proc/net/tcp", "/proc/net/tcp6"}) {
      try {
        for (String line : Files.readAllLines(new File(table).toPath())) {
          String[] f = line.trim().split("\\s+");
          // local_address is hex ADDR:PORT, st 0A is LISTEN, field 9 the socket's inode
          if (f.length > 9 && f[1].endsWith(String.format(":%04X", port)) && f[3].equals("0A")) {
            inodes.add("socket:[" + f[9] + "]");
          }
        }
      } catch (java.io.IOException e) {
        // no such table
      }
    }
    File[] procs = new File("/proc").listFiles((d, n) -> n.matches("[0-9]+"));
    if (inodes.isEmpty() || procs == null) {
      return "";
    }
    for (File proc : procs) {
      File[] fds = new File(proc, "fd").listFiles();
      for (File fd : fds == null ? new File[0] : fds) {
        try {
          if (inodes.contains(Files.readSymbolicLink(fd.toPath()).toString())) {
            String cmd = new String(Files.readAllBytes(new File(proc, "cmdline").toPath()),
                java.nio.charset.StandardCharsets.UTF_8).replace('\0', ' ').trim();
            String parent = ProcessHandle.of(Long.parseLong(proc.getName()))
                .flatMap(ProcessHandle::parent).map(h -> Long.toString(h.pid())).orElse("?");
            return "pid " + proc.getName() + ", parent " + parent + " (this JVM: "
                + ProcessHandle.current().pid() + "): " + cmd;
          }
        } catch (java.io.IOException | RuntimeException e) {
          // the fd or the process went away
        }
      }
    }
    return "";
  }

  static HAServiceState haState(int i) {
    ResourceManager rm = mc.cluster.getResourceManager(i);
    return rm == null ? null : rm.getRMContext().getHAServiceState();
  }

  /** Index of the active RM, waiting up to {@code ms} for one. */
  static int activeIndex(long ms) {
    long end = System.currentTimeMillis() + ms;
    while (System.currentTimeMillis() < end) {
      for (int i = 0; i < IDS.length; i++) {
        if (haState(i) == HAServiceState.ACTIVE) {
          return i;
        }
      }
      try {
        Thread.sleep(50);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
    }
    throw new AssertionError("no active RM within " + ms + " ms");
  }

  static ThemisCapacityScheduler scheduler(int i) {
    return (ThemisCapacityScheduler) mc.cluster.getResourceManager(i).getResourceScheduler();
  }

  private static boolean listening(int port) {
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress("127.0.0.1", port), 500);
      return true;
    } catch (java.io.IOException e) {
      return false;
    }
  }

  private static long liveGpus(ThemisCapacityScheduler s, ApplicationId app) {
    long sum = 0;
    for (Lease l : s.leases().snapshot()) {
      if (l.app().equals(app) && l.isLive(s.leases().now())) {
        sum += l.gpus();
      }
    }
    return sum;
  }

  private static void assertOverLeasedNowhere(ThemisCapacityScheduler s) {
    for (NodeId n : new NodeId[] {n0, n1}) {
      assertTrue(s.leases().liveGpusOnNode(n) <= 2, "over-leased " + n + ": "
          + s.leases().snapshot());
    }
  }

  /** Waits for {@code n} GPU containers of {@code am} on {@code node} and runs them. */
  static List<Container> launch(TestAm am, int n, NodeId node) throws Exception {
    am.awaitGpuContainers(n, 30_000);
    List<Container> out = new ArrayList<>(am.gpuContainers());
    for (Container ct : out) {
      assertEquals(node, ct.getNodeId());
      am.launch(mc, ct, "sleep 600");
    }
    for (Container ct : out) {
      ThemisMiniCluster.waitFor(ct.getId() + " running", 30_000,
          () -> mc.nmState(ct.getId()) == ContainerState.RUNNING);
    }
    return out;
  }

  private static String key(Lease l) {
    return l.id() + "/" + l.app() + "/" + l.node() + "/" + l.gpus() + "/" + l.grantedAtMs() + "/"
        + l.expiryMs() + "/" + l.state();
  }

  private static Set<String> keys(List<Lease> ls) {
    Set<String> out = new TreeSet<>();
    for (Lease l : ls) {
      out.add(key(l));
    }
    return out;
  }

  private static List<Container> concat(List<Container> x, List<Container> y) {
    List<Container> out = new ArrayList<>(x);
    out.addAll(y);
    return out;
  }
}
