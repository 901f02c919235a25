package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.themis.yarn.lease.Lease;

/**
 * CapacityScheduler queues (docs/yarn.md, "Queues"): real RM + 2 NMs with 4 GPUs each + the real
 * Python engine, leaf queues root.a (75%) and root.b (25%), both with maximum capacity 100%, so 6
 * and 2 guaranteed GPUs and 8 at most. Both queues asking: 6/2. Queue b idle: a takes all 8 (b's
 * 2 lent). b asks again: at the expiry of a's leases b gets its 2 back, a its 6.
 *
 * <p>Leases last 10 minutes and the periodic round is 60 s: rounds run when the test signals the
 * round driver, when GPUs are freed, and at lease expiry, which the test brings forward by
 * renewing a lease to end now (enforcement - preempt, grace, kill - is the real path).
 */
class QueuesIT {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static ThemisMiniCluster mc;

  @BeforeAll
  static void up() throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(4);
    conf.set(ThemisSettings.PYTHON_EXECUTABLE, ThemisMiniCluster.testPython());
    conf.setLong(ThemisSettings.LEASE_DURATION_MS, 600_000);
    conf.setLong(ThemisSettings.ROUND_INTERVAL_MS, 60_000);
    conf.setLong(ThemisSettings.FREED_ROUND_DELAY_MS, 200);
    conf.setLong(ThemisSettings.GRACE_PERIOD_MS, 1000);
    conf.set(ThemisSettings.STOCK_APP_POLICY, "preempt"); // TestAm has no agent: no renewal
    String q = "yarn.scheduler.capacity.root.";
    conf.set(q + "queues", "a,b");
    conf.set(q + "a.capacity", "75");
    conf.set(q + "b.capacity", "25");
    for (String leaf : new String[] {"a", "b"}) {
      conf.set(q + leaf + ".maximum-capacity", "100");
      // one user may use the whole cluster (the default, 1, stops a user at the capacity)
      conf.set(q + leaf + ".user-limit-factor", "4");
    }
    mc = new ThemisMiniCluster("themis-queues", 2, conf);
    mc.awaitEngine();
  }

  @AfterAll
  static void down() {
    if (mc != null) {
      mc.close();
    }
  }

  @Test
  void guaranteesFirstIdleGpusLentAndBackAtLeaseExpiry() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    ThemisRuntime rt = s.runtime();

    // 1. Both queues ask 8 GPUs: one round gives a its 6 and b its 2.
    TestAm a = TestAm.start(mc, "user-a", "a");
    TestAm b = TestAm.start(mc, "user-b", "b");
    a.ask(8, 1);
    b.ask(8, 1);
    a.awaitAsked(mc, 8);
    b.awaitAsked(mc, 8);
    rt.driver().signal();
    a.awaitGpuContainers(6, 20_000);
    b.awaitGpuContainers(2, 20_000);
    a.pollFor(1000);
    b.pollFor(1000);
    assertEquals(6, a.gpuContainers().size(), "queue a: 75% of 8 GPUs");
    assertEquals(2, b.gpuContainers().size(), "queue b: 25% of 8 GPUs");
    JsonNode queues = JSON.readTree(rt.cluster().lastView()).path("queues");
    assertEquals("[{\"queue\":\"root.a\",\"guaranteed_gpus\":6,\"max_gpus\":8},"
        + "{\"queue\":\"root.b\",\"guaranteed_gpus\":2,\"max_gpus\":8}]", queues.toString());
    List<Long> firstLeases = new ArrayList<>();
    for (Lease l : s.leases().snapshot()) {
      if (l.app().equals(a.appId)) {
        firstLeases.add(l.id());
      }
    }
    System.out.println("both queues asking 8: a " + leased(a.appId) + ", b " + leased(b.appId)
        + " leased GPUs");

    // 2. Queue b idle (its app finished): its 2 GPUs are lent to a, up to a's maximum (8).
    b.finish();
    a.awaitGpuContainers(8, 20_000);
    assertEquals(8, leased(a.appId), "queue a borrows queue b's idle guarantee");
    System.out.println("queue b idle: a holds " + leased(a.appId) + " leased GPUs");

    // 3. Queue b asks again; nothing is free until a lease of a expires. a asks 6 more (its
    // containers on the expiring leases will be killed); at expiry b gets its 2 back first.
    TestAm b2 = TestAm.start(mc, "user-b2", "b");
    b2.ask(2, 1);
    a.ask(6, 1);
    b2.awaitAsked(mc, 2);
    a.awaitAsked(mc, 6); // both queues in the round at expiry
    assertTrue(b2.pollFor(1500).isEmpty(), "no GPU is free while a holds all 8");
    long now = s.leases().now();
    for (Long id : firstLeases) { // a's first leases (6 GPUs) end now; the lent 2 stay live
      Lease l = s.leases().snapshot().stream().filter(x -> x.id() == id).findFirst().get();
      s.leases().renew(id, l.gpus(), now + 100);
    }
    long t0 = System.currentTimeMillis();
    b2.awaitGpuContainers(2, 30_000);
    System.out.println("lease expiry -> queue b's 2 GPUs back after "
        + (System.currentTimeMillis() - t0) + " ms (grace 1000 ms)");
    ThemisMiniCluster.waitFor("a back to its 6 GPUs", 20_000, () -> {
      a.pollUnchecked();
      return liveGpuContainers(a) == 6;
    });
    b2.pollFor(1000);
    assertEquals(2, b2.gpuContainers().size(), "queue b: its guarantee back");
    assertEquals(6, liveGpuContainers(a), "queue a: its guarantee (2 lent + 4 new)");
    assertEquals(6, leased(a.appId));
    assertEquals(2, leased(b2.appId));
    a.finish();
    b2.finish();
  }

  private static long leased(ApplicationId app) {
    long now = mc.scheduler().leases().now();
    long sum = 0;
    for (Lease l : mc.scheduler().leases().snapshot()) {
      if (l.app().equals(app) && l.isLive(now)) {
        sum += l.gpus();
      }
    }
    return sum;
  }

  private static long liveGpuContainers(TestAm am) {
    List<Object> done = new ArrayList<>();
    for (ContainerStatus st : am.completed) {
      done.add(st.getContainerId());
    }
    return am.gpuContainers().stream().filter(c -> !done.contains(c.getId())).count();
  }
}
