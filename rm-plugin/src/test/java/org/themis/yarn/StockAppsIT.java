package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.InputStream;
import java.net.URI;
import java.net.URL;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.apache.hadoop.util.VersionInfo;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.webapp.util.WebAppUtils;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Apps that do not speak Themis (no agent: TestAm is a plain AMRMClient app, as MapReduce or
 * DistributedShell are), on a real RM with the real Python engine, two NodeManagers with 2 GPUs
 * each: a 2-GPU container ask gets both GPUs of one node and never one GPU on each of two
 * nodes; while it waits, YARN's diagnostics of the app (the application report behind
 * {@code yarn application -status}, and REST {@code /ws/v1/cluster/apps/<id>}) say why and when
 * the next round is; the RM's {@code /jmx} serves the lease table and the asks
 * ({@code themis status --all}).
 */
class StockAppsIT {
  private static final long LEASE_MS = 600_000;
  private static final ObjectMapper JSON = new ObjectMapper();
  private static ThemisMiniCluster mc;
  private static NodeId a;
  private static NodeId b;

  @BeforeAll
  static void up() throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(2);
    conf.set(ThemisSettings.PYTHON_EXECUTABLE,
        ThemisMiniCluster.testPython());
    conf.setLong(ThemisSettings.LEASE_DURATION_MS, LEASE_MS);
    conf.setLong(ThemisSettings.ROUND_INTERVAL_MS, 1000); // the default
    mc = new ThemisMiniCluster("themis-stock", 2, conf);
    a = mc.nodeIds().get(0);
    b = mc.nodeIds().get(1);
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
        () -> mc.scheduler().leases().snapshot().isEmpty());
  }

  /** H holds every GPU (leases set on the RM's table) and runs four 1-GPU containers. */
  private static TestAm holdAll(String name) throws Exception {
    TestAm h = TestAm.start(mc, name);
    mc.scheduler().leases().grant(h.appId, a, 2, LEASE_MS);
    mc.scheduler().leases().grant(h.appId, b, 2, LEASE_MS);
    h.ask(4, 1);
    h.awaitGpuContainers(4, 15_000);
    assertEquals(2, h.gpusOn(a));
    assertEquals(2, h.gpusOn(b));
    return h;
  }

  @Test
  void aTwoGpuAskGetsBothGpusOfOneNodeNeverOneGpuOnEach() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    TestAm h = holdAll("holder-shape");
    // H gives back one container on each node: its leases shrink to what it uses (no agent,
    // no more asks), so one GPU is free on each node.
    releaseOneOn(h, a);
    releaseOneOn(h, b);
    ThemisMiniCluster.waitFor("one GPU free on each node", 10_000,
        () -> s.runtime().cluster().grantableGpus().get(a) == 1 && s.runtime().cluster().grantableGpus().get(b) == 1);
    TestAm stock = TestAm.start(mc, "stock-2gpu");
    stock.ask(1, 2);
    long rounds = s.runtime().driver().rounds();
    // Rounds run (2 free GPUs, a pending ask) but grant nothing: no node has 2 free.
    ThemisMiniCluster.waitFor("rounds with the 2-GPU ask", 15_000, () -> {
      stock.pollUnchecked();
      return s.runtime().driver().rounds() >= rounds + 2;
    });
    assertTrue(stock.gpuContainers().isEmpty());
    assertTrue(s.leases().snapshot().stream().noneMatch(l -> l.app().equals(stock.appId)),
        "no lease on a GPU that cannot hold the container: " + s.leases().snapshot());
    String diag = diagnostics(stock);
    assertTrue(diag.contains("Themis: waiting for GPUs: 2 GPUs asked (1 container of 2 GPUs)")
        && diag.contains("no node has 2 free for one container"), diag);
    JsonNode app = status(stock);
    assertEquals("no-fit", app.path("reason").asText(), app.toString());
    assertEquals(2, app.path("asks").get(0).path("gpus_per_container").asInt());
    // H's container on b ends: b has 2 free GPUs, which go to the 2-GPU container at once.
    releaseOneOn(h, b);
    long t0 = System.currentTimeMillis();
    stock.awaitGpuContainers(1, 10_000);
    System.out.println("2-GPU ask: container of 2 GPUs on one node "
        + (System.currentTimeMillis() - t0) + " ms after the second GPU of the node was freed");
    Container c = stock.gpuContainers().get(0);
    assertEquals(2, Gpus.of(c.getResource()));
    assertEquals(b, c.getNodeId());
    assertEquals(2, s.leases().liveGpus(stock.appId, b));
    assertEquals(0, s.leases().liveGpus(stock.appId, a));
    h.finish();
    stock.finish();
  }

  @Test
  void aWaitingStockAppIsToldWhyAndWhenInItsDiagnostics() throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    TestAm h = holdAll("holder-all");
    TestAm stock = TestAm.start(mc, "stock-waits");
    stock.ask(1, 1);
    ThemisMiniCluster.waitFor("the wait reason in the app report", 10_000, () -> {
      stock.pollUnchecked();
      return diagnostics(stock).contains("all 4 GPUs of the cluster leased or in use");
    });
    String report = diagnostics(stock);
    assertTrue(report.matches("(?s)Themis: waiting for GPUs: 1 GPU asked .*; next round "
        + "at lease expiry in \\d+ s \\(\\d\\d:\\d\\d:\\d\\d\\) or as soon as GPUs are freed"),
        report);
    // the same text over REST, as `yarn application -status` and the web UI show it
    if (ThemisMiniCluster.rmRestServed()) {
      JsonNode rest = get("/ws/v1/cluster/apps/" + stock.appId).path("app");
      assertTrue(rest.path("diagnostics").asText().contains("waiting for GPUs"), rest.toString());
    } else {
      System.out.println("Hadoop " + VersionInfo.getVersion() + ": REST not checked (the RM's "
          + "web services are not served in a mini-cluster of this line)");
    }
    // the status bean: H's leases (GPUs, node, expiry) and the stock app's ask
    JsonNode st = statusJson();
    List<String> leases = new ArrayList<>();
    for (JsonNode l : st.path("leases")) {
      if (l.path("app_id").asText().equals(h.appId.toString())) {
        leases.add(l.path("node_id").asText() + "=" + l.path("gpus").asInt());
        assertTrue(l.path("expiry_ms").asLong() > System.currentTimeMillis());
      }
    }
    Collections.sort(leases);
    assertEquals(List.of(a + "=2", b + "=2"), leases);
    assertEquals("all-leased", status(stock).path("reason").asText());
    assertEquals(4, status(h).path("running_gpus").path(a.toString()).asInt()
        + status(h).path("running_gpus").path(b.toString()).asInt());
    assertEquals("hold", st.path("stock_app_policy").asText());
    // the holder finishes: the stock app's container follows within about a second
    long t0 = System.currentTimeMillis();
    h.finish();
    stock.awaitGpuContainers(1, 10_000);
    System.out.println("holder finished -> stock app's container after "
        + (System.currentTimeMillis() - t0) + " ms");
    // now it holds a lease: its diagnostics say until when (stock-app policy hold)
    ThemisMiniCluster.waitFor("holding diagnostics", 5_000,
        () -> diagnostics(stock).contains("app without a Themis agent: its leases renew while "
            + "its containers run"));
    stock.finish();
  }

  @Test
  void idleGpusReachAStockAppWithinARound() throws Exception {
    List<Long> ms = new ArrayList<>();
    for (int i = 0; i < 5; i++) {
      noLeases();
      TestAm stock = TestAm.start(mc, "stock-idle-" + i);
      stock.ask(1, 2);
      long t0 = System.currentTimeMillis();
      stock.awaitGpuContainers(1, 10_000);
      ms.add(System.currentTimeMillis() - t0);
      assertEquals(2, Gpus.of(stock.gpuContainers().get(0).getResource()));
      stock.finish();
    }
    Collections.sort(ms);
    System.out.println("idle GPUs -> stock app's 2-GPU container (round-interval 1000 ms, NM "
        + "heartbeat 100 ms), 5 trials: " + ms + " ms");
    assertTrue(ms.get(4) < 5_000, "a stock app waits at most about one round on idle GPUs: "
        + ms);
  }

  private static void releaseOneOn(TestAm am, NodeId node) {
    for (Container c : am.gpuContainers()) {
      if (c.getNodeId().equals(node) && am.gpusOn(node) > 0
          && am.completed.stream().noneMatch(x -> x.getContainerId().equals(c.getId()))
          && !released.contains(c.getId().toString())) {
        released.add(c.getId().toString());
        am.release(c.getId());
        am.pollUnchecked();
        return;
      }
    }
    throw new AssertionError("no live GPU container of " + am.appId + " on " + node);
  }

  private static final List<String> released = new ArrayList<>();

  private static String diagnostics(TestAm am) {
    try {
      return mc.client.getApplicationReport(am.appId).getDiagnostics();
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }

  private static JsonNode get(String path) throws Exception {
    String base = WebAppUtils.getRMWebAppURLWithScheme(
        mc.cluster.getResourceManager().getConfig());
    URL url = URI.create(base + path).toURL();
    try (InputStream in = url.openStream()) {
      return JSON.readTree(in);
    }
  }

  private static JsonNode statusJson() throws Exception {
    JsonNode beans = get("/jmx?qry=Hadoop:service=ResourceManager,name=Themis").path("beans");
    assertEquals(1, beans.size(), "the Themis bean in the RM's /jmx: " + beans);
    return JSON.readTree(beans.get(0).path("StatusJson").asText());
  }

  private static JsonNode status(TestAm am) throws Exception {
    for (JsonNode app : statusJson().path("apps")) {
      if (app.path("app_id").asText().equals(am.appId.toString())) {
        return app;
      }
    }
    throw new AssertionError(am.appId + " not in the status bean's apps");
  }
}
