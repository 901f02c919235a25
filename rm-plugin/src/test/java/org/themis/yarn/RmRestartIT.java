package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerExitStatus;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerState;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.resourcemanager.recovery.FileSystemRMStateStore;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.themis.yarn.lease.FsLeaseStore;
import org.themis.yarn.lease.Lease;
import org.themis.yarn.lease.LeaseStore;
import org.themis.yarn.lease.LeaseStores;
import org.themis.yarn.lease.StoredLeases;

/**
 * Work-preserving ResourceManager restart with the plugin (docs/yarn.md, "Restart and HA"):
 * a real RM (FileSystemRMStateStore, recovery and work-preserving recovery on), two real
 * NodeManagers with 2 GPUs each running real containers ({@code sleep}), the real Python
 * engine. The RM is stopped and a new one started in the same mini-cluster; the NodeManagers
 * and the AMs re-register with it.
 */
class RmRestartIT {
  private static final long LEASE_MS = 600_000;
  private static final long GRACE_MS = 3000;
  static ThemisMiniCluster mc;
  static NodeId n0;
  static NodeId n1;
  /** The lease store, opened by the test for reading it on its own (never claimed). */
  static LeaseStore check;
  /** How the RM names its store: {@code fs } or {@code zookeeper }. */
  static String storeKind;
  private final List<TestAm> apps = new ArrayList<>();

  static YarnConfiguration restartConf(File stateDir) {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(2);
    conf.set(ThemisSettings.PYTHON_EXECUTABLE, ThemisMiniCluster.testPython());
    conf.setLong(ThemisSettings.LEASE_DURATION_MS, LEASE_MS);
    conf.setLong(ThemisSettings.GRACE_PERIOD_MS, GRACE_MS);
    // rounds only when woken (lease changes, freed GPUs, recovery settled): no stray grants
    conf.setLong(ThemisSettings.ROUND_INTERVAL_MS, 60_000);
    conf.setLong(ThemisSettings.RECOVERY_SETTLE_MS, 30_000);
    conf.setBoolean(YarnConfiguration.RECOVERY_ENABLED, true);
    conf.setBoolean(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_ENABLED, true);
    conf.set(YarnConfiguration.RM_STORE, FileSystemRMStateStore.class.getName());
    conf.set(YarnConfiguration.FS_RM_STATE_STORE_URI,
        new File(stateDir, "rmstore").toURI().toString());
    conf.setLong(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_SCHEDULING_WAIT_MS, 1000);
    // NMs and AMs find the restarted RM within a fraction of a second (default 30 s)
    conf.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_RETRY_INTERVAL_MS, 200);
    conf.setLong(YarnConfiguration.NM_RESOURCEMANAGER_CONNECT_RETRY_INTERVAL_MS, 200);
    // NMs talk to the RM over RPC: the mini-cluster's default short-circuit binds each NM to
    // the first RM object, which a restart replaces
    conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_USE_RPC, true);
    // RPC needs fixed RM ports: free ones, so that the restarted RM listens where the NMs and
    // AMs look for it (and other clusters on the machine are not in the way)
    conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, true);
    for (String key : new String[] {YarnConfiguration.RM_ADDRESS,
        YarnConfiguration.RM_SCHEDULER_ADDRESS, YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS,
        YarnConfiguration.RM_ADMIN_ADDRESS, YarnConfiguration.RM_WEBAPP_ADDRESS,
        YarnConfiguration.RM_WEBAPP_HTTPS_ADDRESS}) {
      conf.set(key, "localhost:" + freePort());
    }
    return conf;
  }

  private static final java.util.Set<Integer> GIVEN =
      java.util.concurrent.ConcurrentHashMap.newKeySet();

  /**
   * A port free now and below the kernel's ephemeral range (ip_local_port_range), so that no
   * outgoing connection is given it before the daemon that is to listen there binds it: a
   * port from {@code new ServerSocket(0)} is an ephemeral one, and RmHaIT's second RM once
   * found its agents' port taken by a connection made meanwhile ("Address already in use").
   */
  static int freePort() {
    int low = 32768;  // (ports handed out before are not handed out again: GIVEN)
    try {
      // (line by line: readAllBytes trusts procfs's size of 0 and reads a piece)
      String range = Files.readAllLines(
          java.nio.file.Paths.get("/proc/sys/net/ipv4/ip_local_port_range")).get(0).trim();
      low = Integer.parseInt(range.split("\\s+")[0]);
    } catch (java.io.IOException | RuntimeException e) {
      // not Linux: the default low end of the ephemeral range on Linux and most others
    }
    if (low < 14000) {
      low = 32768;  // an odd range: the usual one
    }
    int base = Math.min(low, 32768) - 12000;
    java.util.Random rng = new java.util.Random();
    for (int attempt = 0; attempt < 200; attempt++) {
      int port = base + rng.nextInt(Math.max(1, low - base));
      if (!GIVEN.add(port)) {
        continue;
      }
      try (java.net.ServerSocket ss = new java.net.ServerSocket()) {
        ss.setReuseAddress(false);
        ss.bind(new java.net.InetSocketAddress("0.0.0.0", port));
        return port;
      } catch (java.io.IOException e) {
        // taken: try another
      }
    }
    try (java.net.ServerSocket ss = new java.net.ServerSocket(0)) {
      return ss.getLocalPort();
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  @BeforeAll
  static void up() throws Exception {
    File dir = Files.createTempDirectory("themis-restart").toFile();
    YarnConfiguration conf = restartConf(dir);
    start("themis-restart", conf, "fs ");
    check = new FsLeaseStore(conf, LeaseStores.fsDir(conf, ThemisSettings.from(conf)));
  }

  static void start(String name, YarnConfiguration conf, String kind) throws Exception {
    storeKind = kind;
    mc = new ThemisMiniCluster(name, 2, conf);
    n0 = mc.nodeIds().get(0);
    n1 = mc.nodeIds().get(1);
    mc.awaitEngine();
  }

  @AfterAll
  static void down() throws Exception {
    if (check != null) {
      check.close();
    }
    if (mc != null) {
      mc.close();
    }
  }

  @AfterEach
  void finishApps() throws Exception {
    for (TestAm am : apps) {
      try {
        am.finish();
      } catch (Exception e) {
        // already finished by the test
      }
    }
    ThemisMiniCluster.waitFor("leases of the test gone", 20_000,
        () -> mc.scheduler().leases().size() == 0);
  }

  private TestAm app(String name) throws Exception {
    TestAm am = TestAm.start(mc, name);
    apps.add(am);
    return am;
  }

  @Test
  void leasesSurviveARestartAndRunningContainersKeepTheirGpus() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    assertTrue(s.recovery().enabled());
    assertTrue(s.recovery().storeName().startsWith(storeKind), s.recovery().storeName());
    // A holds both GPUs of n0 (two running containers) and one GPU of n1 between jobs (no
    // container there); A's AM speaks to the agents' endpoint.
    TestAm a = app("holder");
    s.leases().grant(a.appId, n0, 2, LEASE_MS);
    s.runtime().agents().agentJoined(a.appId.toString());
    a.ask(2, 1);
    List<Container> aRunning = launch(a, 2, n0);
    s.leases().grant(a.appId, n1, 1, LEASE_MS);
    // C runs a GPU container on n1 whose lease record is lost (as if the RM died before the
    // write): after the restart it must get a lease by the reconciliation rule.
    TestAm c = app("orphan");
    Lease cLease = s.leases().grant(c.appId, n1, 1, LEASE_MS);
    c.ask(1, 1);
    List<Container> cRunning = launch(c, 1, n1);
    assertTrue(s.leases().remove(cLease.id()));
    // B waits for a GPU: none is free.
    TestAm b = app("waiter");
    b.ask(1, 1);
    assertTrue(b.pollFor(1000).isEmpty());
    // write-through: the store holds the table as it is now (read independently of the RM)
    assertTrue(s.recovery().flush(5000), "lease store write");
    StoredLeases stored = check.read();
    assertNotNull(stored);
    assertEquals(keys(s.leases().snapshot()), keys(stored.leases()));
    assertTrue(stored.agentApps().contains(a.appId), stored.agentApps().toString());
    Set<String> before = keys(s.leases().snapshot());

    long t0 = System.currentTimeMillis();
    ThemisCapacityScheduler s2 = restart();
    long settledMs = System.currentTimeMillis() - t0;
    // the same leases (ids, expiries, states), plus one for C's container that had none
    Set<String> after = keys(s2.leases().snapshot());
    assertTrue(after.containsAll(before), "lost in the restart: " + before + " -> " + after);
    List<Lease> adopted = new ArrayList<>();
    for (Lease l : s2.leases().snapshot()) {
      if (!before.contains(key(l))) {
        adopted.add(l);
      }
    }
    assertEquals(1, adopted.size(), adopted.toString());
    assertEquals(c.appId, adopted.get(0).app());
    assertEquals(n1, adopted.get(0).node());
    assertEquals(1, adopted.get(0).gpus());
    assertTrue(adopted.get(0).expiryMs() > System.currentTimeMillis() + LEASE_MS - 60_000);
    assertTrue(s2.runtime().agents().hasAgent(a.appId), "A's agent is remembered");
    // running containers kept running through the restart and are the RM's again
    for (Container ct : concat(aRunning, cRunning)) {
      assertEquals(ContainerState.RUNNING, mc.nmState(ct.getId()), ct.getId() + " on its NM");
    }
    ThemisMiniCluster.waitFor("A's containers recovered by the new RM", 10_000,
        () -> s2.usedGpus(a.appId, n0) == 2);
    // no GPU is free: the waiting app gets nothing (the round after settling had nothing to
    // decide), while A's and C's containers keep running and no one is preempted
    assertEquals(0L, s2.runtime().cluster().grantableGpus().get(n0));
    assertEquals(0L, s2.runtime().cluster().grantableGpus().get(n1));
    assertTrue(b.pollFor(2000).isEmpty(), "B got a GPU in use by A or C");
    a.pollUnchecked();
    c.pollUnchecked();
    assertTrue(a.preemptAsked.isEmpty() && a.completed.isEmpty(), a.completed.toString());
    assertTrue(c.preemptAsked.isEmpty() && c.completed.isEmpty(), c.completed.toString());
    // a grant the engine would make over A's GPUs is refused at apply time
    assertEquals(0, s2.runtime().driver().applyGrants("{\"grants\":[{\"app_id\":\"" + b.appId
        + "\",\"node_id\":\"" + n0 + "\",\"gpus\":1}]}"));
    // A finishes: its GPUs go to B through a real round of the restarted engine
    long rounds = s2.runtime().driver().rounds();
    a.finish();
    long t1 = System.currentTimeMillis();
    try {
      ThemisMiniCluster.waitFor("B's container after A finished", 30_000, () -> {
        b.pollUnchecked();
        return b.gpuContainers().size() == 1;
      });
    } catch (AssertionError e) {
      throw new AssertionError(e.getMessage() + "; " + state(s2, a, b, c), e);
    }
    System.out.println("restart: settled " + settledMs + " ms after the restart began; A's "
        + "finish -> B's container " + (System.currentTimeMillis() - t1) + " ms");
    assertTrue(s2.runtime().driver().rounds() > rounds);
    assertEquals(1, b.gpuContainers().size());
    for (NodeId n : new NodeId[] {n0, n1}) {
      assertTrue(s2.leases().liveGpusOnNode(n) <= 2, "over-leased " + n + ": "
          + s2.leases().snapshot());
    }
    assertEquals(ContainerState.RUNNING, mc.nmState(cRunning.get(0).getId()), "C still runs");
  }

  @Test
  void aLeaseThatExpiredWhileTheRmWasDownIsWarnedThenKilledAfterTheGracePeriod()
      throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    TestAm d = app("expires-while-down");
    s.runtime().agents().agentJoined(d.appId.toString()); // an agent app: no hold, enforced at expiry
    Lease l = s.leases().grant(d.appId, n0, 1, LEASE_MS);
    d.ask(1, 1);
    Container ct = launch(d, 1, n0).get(0);
    long expiry = System.currentTimeMillis() + 2000;
    assertNotNull(s.leases().renew(l.id(), 1, expiry));
    mc.cluster.stopResourceManager(0);
    long stopped = System.currentTimeMillis();
    System.out.println("expiry test: RM stopped " + (expiry - stopped) + " ms before the expiry");
    assertTrue(stopped < expiry, "the RM took too long to stop; the lease expired before");
    Thread.sleep(Math.max(0, expiry + 1000 - System.currentTimeMillis()));
    ThemisCapacityScheduler s2 = restart();
    long settled = System.currentTimeMillis();
    assertEquals(ContainerState.RUNNING, mc.nmState(ct.getId()), "not killed by the restart");
    // When the restarted RM set the lease EXPIRING, read from its lease table: the lease keeps
    // its id and carries its grace deadline (expiring time + grace). The AM's view of the notice
    // comes up to a heartbeat and an event dispatch later, so the grace is measured from here.
    long[] graceDeadline = {0};
    ThemisMiniCluster.waitFor("the lease EXPIRING after the restart", 15_000, () -> {
      for (Lease x : s2.leases().snapshot()) {
        if (x.id() == l.id() && x.state() == Lease.State.EXPIRING) {
          graceDeadline[0] = x.graceDeadlineMs();
          return true;
        }
      }
      return false;
    });
    long expiring = graceDeadline[0] - GRACE_MS;
    ThemisMiniCluster.waitFor("preemption notice after the restart", 15_000, () -> {
      d.pollUnchecked();
      return d.preemptAsked.contains(ct.getId());
    });
    long warned = System.currentTimeMillis();
    assertFalse(done(d, ct.getId()), "killed with the notice");
    ThemisMiniCluster.waitFor("kill after the grace period", 20_000, () -> {
      d.pollUnchecked();
      return done(d, ct.getId());
    });
    long killed = System.currentTimeMillis();
    ContainerStatus st = null;
    for (ContainerStatus x : d.completed) {
      if (x.getContainerId().equals(ct.getId())) {
        st = x;
      }
    }
    assertNotNull(st);
    assertEquals(ContainerExitStatus.PREEMPTED, st.getExitStatus(), st.toString());
    System.out.println("expiry test: settled -> EXPIRING " + (expiring - settled)
        + " ms, EXPIRING -> notice seen by the AM " + (warned - expiring)
        + " ms, EXPIRING -> kill seen by the AM " + (killed - expiring) + " ms (grace "
        + GRACE_MS + " ms)");
    assertTrue(expiring >= expiry, "EXPIRING before the lease's expiry");
    // the kill comes no earlier than the grace deadline (the AM sees it later still)
    assertTrue(killed >= expiring + GRACE_MS, "grace " + GRACE_MS + " ms, killed "
        + (killed - expiring) + " ms after the lease became EXPIRING");
    assertTrue(s2.runtime().enforcer().preemptMarks() >= 1 && s2.runtime().enforcer().killMarks() >= 1);
  }

  // ------------------------------------------------------------------ helpers

  /** What the RM and the plugin hold now, for a failure's message. */
  private static String state(ThemisCapacityScheduler s, TestAm... ams) {
    StringBuilder out = new StringBuilder("rounds " + s.runtime().driver().rounds()
        + ", grantable " + s.runtime().cluster().grantableGpus() + ", leases "
        + s.leases().snapshot() + ", recovery settled " + s.recovery().settled());
    for (org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode n
        : s.getNodeTracker().getAllNodes()) {
      out.append(", node ").append(n.getNodeID()).append(s.recovery().nodeRecovering(
          n.getNodeID()) ? " (being added)" : "").append(": unallocated ")
          .append(n.getUnallocatedResource()).append(", running ");
      for (org.apache.hadoop.yarn.server.resourcemanager.rmcontainer.RMContainer ct
          : n.getCopiedListOfRunningContainers()) {
        out.append(ct.getContainerId()).append('=').append(ct.getState()).append(' ');
      }
    }
    for (TestAm am : ams) {
      org.apache.hadoop.yarn.server.resourcemanager.rmapp.RMApp app =
          s.getRMContext().getRMApps().get(am.appId);
      out.append(", ").append(am.appId).append(' ').append(app == null ? "gone" : app.getState())
          .append(" used ").append(s.usedGpus(am.appId, n0)).append('+')
          .append(s.usedGpus(am.appId, n1));
    }
    return out.toString();
  }

  /** Restarts the RM; returns the new scheduler once its lease recovery has settled. */
  private static ThemisCapacityScheduler restart() throws Exception {
    mc.cluster.restartResourceManager(0);
    ThemisCapacityScheduler s = mc.scheduler();
    ThemisMiniCluster.waitFor("NodeManagers back", 60_000,
        () -> mc.scheduler().getNodeTracker().nodeCount() == 2);
    ThemisMiniCluster.waitFor("lease recovery settled", 60_000, () -> s.recovery().settled());
    return s;
  }

  /** Waits for {@code n} GPU containers of {@code am} on {@code node} and runs them. */
  static List<Container> launch(TestAm am, int n, NodeId node) throws Exception {
    ThemisMiniCluster.waitFor(am.appId + ": " + n + " GPU container(s)", 15_000, () -> {
      am.pollUnchecked();
      return am.gpuContainers().size() >= n;
    });
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

  private static boolean done(TestAm am, ContainerId id) {
    for (ContainerStatus x : am.completed) {
      if (x.getContainerId().equals(id)) {
        return true;
      }
    }
    return false;
  }

  private static String key(Lease l) {
    return l.id() + "/" + l.app() + "/" + l.node() + "/" + l.gpus() + "/" + l.grantedAtMs() + "/"
        + l.expiryMs() + "/" + l.state() + "/" + l.graceDeadlineMs();
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
