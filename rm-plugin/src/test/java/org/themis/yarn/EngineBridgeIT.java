package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.service.Service;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.themis.yarn.engine.EngineSupervisor;
import org.themis.yarn.lease.Lease;

/**
 * Real RM + 2 NMs (4 GPUs each) + the real Python engine ({@code python3 -m themis.yarn.engine},
 * needs the repo importable: surefire sets PYTHONPATH) over real Py4J.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class EngineBridgeIT {
  private static ThemisMiniCluster mc;

  @BeforeAll
  static void up() throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(4);
    String py = ThemisMiniCluster.testPython();
    conf.set(ThemisSettings.PYTHON_EXECUTABLE, py);
    // Each round sleeps 1 s in the engine so that the test can kill it mid-round.
    conf.set(ThemisSettings.ENGINE_COMMAND, "-m themis.yarn.engine --round-delay-s 1.0");
    conf.setLong(ThemisSettings.ROUND_TIMEOUT_MS, 20_000);
    conf.setLong(ThemisSettings.ENGINE_RESTART_BACKOFF_MS, 200);
    conf.setLong(ThemisSettings.ROUND_INTERVAL_MS, 300);
    mc = new ThemisMiniCluster("themis-engine", 2, conf);
  }

  @AfterAll
  static void down() {
    if (mc != null) {
      mc.close();
    }
  }

  private static void pollUntil(String what, long ms, TestAm am, int gpuContainers)
      throws InterruptedException {
    try {
      ThemisMiniCluster.waitFor(what, ms, () -> {
        try {
          am.poll();
        } catch (Exception e) {
          throw new RuntimeException(e);
        }
        return am.gpuContainers().size() >= gpuContainers;
      });
    } catch (AssertionError err) {
      throw withEngineOutput(err);
    }
  }

  /** A failure message that carries the engine's last output (e.g. a missing Python module). */
  private static AssertionError withEngineOutput(AssertionError err) {
    EngineSupervisor e = mc.scheduler().runtime().engine();
    return new AssertionError(err.getMessage() + "; engine starts=" + e.starts() + " failures="
        + e.failures() + "; engine output:\n" + String.join("\n", e.recentOutput()), err);
  }

  /** No GPU is promised twice: live leases per node never exceed the node's GPUs. */
  private static void assertNoDoubleGrant(TestAm... apps) {
    ThemisCapacityScheduler s = mc.scheduler();
    for (FiCaSchedulerNode n : mc.nodes()) {
      long leased = s.leases().liveGpusOnNode(n.getNodeID());
      assertTrue(leased <= Gpus.of(n.getTotalResource()),
          "node " + n.getNodeID() + " has " + leased + " GPUs under lease");
      for (TestAm am : apps) {
        assertTrue(am.gpusOn(n.getNodeID()) <= s.leases().liveGpus(am.appId, n.getNodeID()),
            am.appId + " holds more GPUs on " + n.getNodeID() + " than it leased");
      }
    }
  }

  @Test
  @Order(1)
  void roundsGrantLeasesAndContainersFollow() throws Exception {
    TestAm a = TestAm.start(mc, "app-a");
    TestAm b = TestAm.start(mc, "app-b");
    a.ask(2, 1);
    b.ask(3, 1);
    pollUntil("app-a GPU containers", 60_000, a, 2);
    pollUntil("app-b GPU containers", 30_000, b, 3);
    a.pollFor(500);
    assertEquals(2, a.gpuContainers().size());
    assertEquals(3, b.gpuContainers().size());
    assertNoDoubleGrant(a, b);
    // what an agent's Hello carries for its app: the app's live leases, GPUs per node
    com.fasterxml.jackson.databind.JsonNode held = new com.fasterxml.jackson.databind
        .ObjectMapper().readTree(mc.scheduler().runtime().agents().appLeases(b.appId.toString()));
    int heldGpus = 0;
    for (com.fasterxml.jackson.databind.JsonNode l : held) {
      assertTrue(l.get("node_id").asText().contains(":"), held.toString());
      assertTrue(l.get("expiry_ms").asLong() > System.currentTimeMillis(), held.toString());
      heldGpus += l.get("gpus").asInt();
    }
    assertEquals(3, heldGpus, held.toString());
    // every lease lasts what the engine chose within lease +- spread / 2 (lease-spread-ms)
    ThemisSettings st = mc.scheduler().runtime().settings();
    for (org.themis.yarn.lease.Lease l : mc.scheduler().leases().snapshot()) {
      long length = l.expiryMs() - l.grantedAtMs();
      assertTrue(Math.abs(length - st.leaseDurationMs()) <= st.leaseSpreadMs() / 2,
          "lease " + l + " lasts " + length + " ms");
    }
    assertEquals("[]", mc.scheduler().runtime().agents().appLeases("application_1_9999"));
    assertEquals("[]", mc.scheduler().runtime().agents().appLeases("not an id"));
    EngineSupervisor e = mc.scheduler().runtime().engine();
    assertEquals(1, e.starts());
    assertTrue(e.health().orElseThrow().contains("\"ok\": true"));
    assertTrue(mc.scheduler().runtime().driver().grantsApplied() >= 2);
  }

  @Test
  @Order(2)
  void engineKilledMidRoundIsRestartedWithoutDoubleGrant() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    EngineSupervisor e = s.runtime().engine();
    long startsBefore = e.starts();
    long failuresBefore = e.failures();
    Map<Long, Lease> before = new HashMap<>();
    for (Lease l : s.leases().snapshot()) {
      before.put(l.id(), l);
    }
    TestAm c = TestAm.start(mc, "app-c");
    c.ask(2, 1);
    try {
      // poll() sends the ask to the RM; a round then starts (and sleeps 1 s in the engine).
      ThemisMiniCluster.waitFor("a round in progress", 30_000, () -> {
        try {
          c.poll();
        } catch (Exception ex) {
          throw new RuntimeException(ex);
        }
        return e.inRound();
      });
    } catch (AssertionError err) {
      throw withEngineOutput(new AssertionError(
          err.getMessage() + "; last view " + s.runtime().cluster().lastView(), err));
    }
    long pid = e.pid();
    assertTrue(pid > 0);
    ProcessHandle.of(pid).orElseThrow().destroyForcibly();
    pollUntil("app-c GPU containers after the restart", 60_000, c, 2);
    assertTrue(e.starts() > startsBefore, "engine restarted");
    assertTrue(e.failures() > failuresBefore, "failure recorded");
    assertTrue(e.pid() > 0 && e.pid() != pid);
    assertEquals(Service.STATE.STARTED, mc.cluster.getResourceManager().getServiceState());
    // Leases granted before the crash are untouched.
    for (Lease l : before.values()) {
      assertTrue(s.leases().snapshot().contains(l), "lease " + l + " lost in the restart");
    }
    assertNoDoubleGrant(c);
  }

  @Test
  @Order(3)
  void grantsBeyondFreeGpusAreRefused() {
    ThemisCapacityScheduler s = mc.scheduler();
    ThemisRuntime rt = s.runtime();
    Map<NodeId, Long> free = rt.cluster().grantableGpus();
    NodeId node = mc.nodeIds().get(0);
    String app = s.getSchedulerApplications().keySet().iterator().next().toString();
    long refused = rt.driver().grantsRefused();
    int leases = s.leases().size();
    int applied = rt.driver().applyGrants("{\"grants\": [{\"app_id\": \"" + app + "\", \"node_id\": \""
        + node + "\", \"gpus\": " + (free.get(node) + 1) + "}, {\"app_id\": \"" + app
        + "\", \"node_id\": \"nowhere:1\", \"gpus\": 1}]}");
    assertEquals(0, applied);
    assertEquals(refused + 2, rt.driver().grantsRefused());
    assertEquals(leases, s.leases().size());
    assertTrue(List.of(0, 1).size() == 2);
  }

  /**
   * The agents' endpoint end to end: a real Python agent (themis.agent.probe) registers over
   * gRPC with the YARN application id, is offered the free GPU in the RM's next round, bids
   * with the real bid-table code, wins, and the app's container follows.
   */
  @Test
  @Order(4)
  void anAgentOverGrpcIsOfferedGpusBidsAndWins() throws Exception {
    EngineSupervisor e = mc.scheduler().runtime().engine();
    String address = e.agentAddress();
    assertTrue(address.startsWith("127.0.0.1:"), "agent address published: '" + address + "'");
    TestAm d = TestAm.start(mc, "app-d");
    List<String> lines = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
    Process probe = d.startProbe(address, lines, "--demand", "1", "--timeout-s", "120");
    try {
      ThemisMiniCluster.waitFor("the probe agent to register", 60_000,
          () -> String.join("\n", lines).contains("\"registered\""));
      // The engine tells the RM through the gateway: d's AM speaks for its leases now.
      ThemisMiniCluster.waitFor("the RM to know d's agent", 10_000,
          () -> mc.scheduler().runtime().agents().hasAgent(d.appId));
      d.ask(1, 1);
      pollUntil("app-d's GPU container, won by its agent's bid", 90_000, d, 1);
      assertTrue(probe.waitFor(60, java.util.concurrent.TimeUnit.SECONDS), "probe exits");
      ThemisMiniCluster.waitFor("the probe's last line", 5_000,
          () -> String.join("\n", lines).contains("\"done\""));
      String out = String.join("\n", lines);
      assertEquals(0, probe.exitValue(), out);
      assertTrue(out.contains("\"event\": \"offer\""), "offered over gRPC:\n" + out);
      assertTrue(out.contains("\"was_bidder\": true"), "won as a bidder:\n" + out);
      // The probe unregistered when it exited: the RM forgets d's agent; the GPU its
      // container uses stays leased (assertNoDoubleGrant below).
      ThemisMiniCluster.waitFor("the RM to drop d's agent", 10_000,
          () -> !mc.scheduler().runtime().agents().hasAgent(d.appId));
      assertNoDoubleGrant(d);
    } catch (AssertionError err) {
      throw withEngineOutput(new AssertionError(err.getMessage() + "; probe output:\n"
          + String.join("\n", lines), err));
    } finally {
      probe.destroyForcibly();
    }
  }

  /**
   * The RM ends an AM's registration when its app ends: the engine drops it (appEnded), the
   * agent's stream closes, and its AMRMToken no longer registers ("the application has
   * finished", checked by the RM).
   */
  @Test
  @Order(5)
  void theRegistrationEndsWithTheApp() throws Exception {
    TestAm e = TestAm.start(mc, "app-e");
    List<String> lines = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
    Process probe = e.startProbe(mc.scheduler().runtime().engine().agentAddress(), lines,
        "--until", "refused", "--timeout-s", "40");
    try {
      ThemisMiniCluster.waitFor("the probe agent to register", 60_000,
          () -> String.join("\n", lines).contains("\"registered\""));
      ThemisMiniCluster.waitFor("the RM to know e's agent", 10_000,
          () -> mc.scheduler().runtime().agents().hasAgent(e.appId));
      e.finish();
      assertTrue(probe.waitFor(90, java.util.concurrent.TimeUnit.SECONDS), "probe exits");
      ThemisMiniCluster.waitFor("the probe's last line", 5_000,
          () -> String.join("\n", lines).contains("\"done\""));
      String out = String.join("\n", lines);
      assertTrue(out.contains("PERMISSION_DENIED") && out.contains("has finished"),
          "the agent's re-registration is refused once its app ended:\n" + out);
    } catch (AssertionError err) {
      throw withEngineOutput(new AssertionError(err.getMessage() + "; probe output:\n"
          + String.join("\n", lines), err));
    } finally {
      probe.destroyForcibly();
    }
  }

  /**
   * An engine that dies while no round is due comes back by itself (the round loop's
   * supervision): the AMs' agents can register again before the next round needs it. Nothing
   * here calls the engine (health() would start it).
   */
  @Test
  @Order(6)
  void engineKilledWhileNoRoundIsDueComesBackAtOnce() throws Exception {
    EngineSupervisor e = mc.scheduler().runtime().engine();
    long startsBefore = e.starts();
    long pid = e.pid();
    assertTrue(pid > 0);
    ProcessHandle.of(pid).orElseThrow().destroyForcibly();
    // back-off 1 s (default), a tick of the round loop, the engine's start-up
    ThemisMiniCluster.waitFor("the engine started again", 30_000,
        () -> e.starts() > startsBefore && e.pid() > 0);
    assertTrue(e.pid() != pid);
    assertTrue(mc.scheduler().runtime().engine().agentAddress().contains(":"));
  }
}
