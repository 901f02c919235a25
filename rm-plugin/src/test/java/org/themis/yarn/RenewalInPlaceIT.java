package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.themis.yarn.lease.Lease;

/**
 * Renewal in place (docs/yarn.md): real RM + one NodeManager with one GPU + the real Python
 * engine + a real agent (themis.agent.probe) over gRPC. The app's lease is offered in a round
 * {@code renew-ahead-ms} before it ends (8-s leases: 2 s ahead), the app wins its GPU back,
 * the RM renews the lease in place (same id, later expiry) and its container is never marked
 * for preemption; the agent hears the grant as a renewal.
 */
class RenewalInPlaceIT {
  private static final long LEASE_MS = 8_000;
  private static ThemisMiniCluster mc;

  @BeforeAll
  static void up() throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(1);
    conf.set(ThemisSettings.PYTHON_EXECUTABLE, ThemisMiniCluster.testPython());
    conf.setLong(ThemisSettings.LEASE_DURATION_MS, LEASE_MS);
    conf.setLong(ThemisSettings.LEASE_SPREAD_MS, 0);
    conf.setLong(ThemisSettings.ROUND_INTERVAL_MS, 300);
    conf.setLong(ThemisSettings.GRACE_PERIOD_MS, 5_000);
    mc = new ThemisMiniCluster("themis-renewal", 1, conf);
  }

  @AfterAll
  static void down() {
    if (mc != null) {
      mc.close();
    }
  }

  private static Lease leaseOf(TestAm am) {
    for (Lease l : mc.scheduler().leases().snapshot()) {
      if (l.app().equals(am.appId)) {
        return l;
      }
    }
    return null;
  }

  @Test
  void aLeaseWonBackByItsHolderIsRenewedInPlaceAndItsContainerGoesOn() throws Exception {
    ThemisRuntime rt = mc.scheduler().runtime();
    assertEquals(LEASE_MS / 4, rt.settings().renewAheadMs());
    TestAm f = TestAm.start(mc, "app-f");
    List<String> lines = Collections.synchronizedList(new ArrayList<>());
    Process probe = f.startProbe(rt.engine().agentAddress(), lines, "--demand", "1",
        "--until", "renewal", "--timeout-s", "120");
    try {
      ThemisMiniCluster.waitFor("the probe agent to register", 60_000,
          () -> String.join("\n", lines).contains("\"registered\""));
      ThemisMiniCluster.waitFor("the RM to know f's agent", 10_000,
          () -> rt.agents().hasAgent(f.appId));
      f.ask(1, 1);
      ThemisMiniCluster.waitFor("f's GPU container", 60_000, () -> {
        f.pollUnchecked();
        return f.gpuContainers().size() == 1;
      });
      Lease first = leaseOf(f);
      assertTrue(first != null, "f holds a lease");
      long preempts = rt.enforcer().preemptMarks();
      ThemisMiniCluster.waitFor("f's lease renewed in place", 30_000, () -> {
        f.pollUnchecked();
        return rt.driver().renewedInPlace() >= 1;
      });
      // past the lease's first expiry and a few enforcement passes
      while (System.currentTimeMillis() < first.expiryMs() + 1_500) {
        f.pollFor(200);
      }
      Lease now = leaseOf(f);
      assertEquals(first.id(), now.id(), "the same lease: " + mc.scheduler().leases().snapshot());
      assertTrue(now.expiryMs() > first.expiryMs(), "a later expiry: " + now);
      assertEquals(preempts, rt.enforcer().preemptMarks(), "no container was preempted");
      assertTrue(f.preemptAsked.isEmpty(), "no preemption notice: " + f.preemptAsked);
      assertEquals(1, f.gpuContainers().size());
      assertTrue(probe.waitFor(60, TimeUnit.SECONDS), "the probe exits after the renewal");
      String out = String.join("\n", lines);
      assertTrue(out.contains("\"vias\": [\"renewal\"]"), "heard as a renewal:\n" + out);
    } catch (AssertionError err) {
      throw new AssertionError(err.getMessage() + "; probe output:\n"
          + String.join("\n", lines) + "\nengine output:\n"
          + String.join("\n", rt.engine().recentOutput()), err);
    } finally {
      probe.destroyForcibly();
    }
  }
}
