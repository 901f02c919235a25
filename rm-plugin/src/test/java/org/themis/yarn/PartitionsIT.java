package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.util.List;
import java.util.Set;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.themis.yarn.lease.Lease;
import org.themis.yarn.status.ThemisMetrics;

/**
 * YARN node labels (docs/yarn.md, "Partitions"): real RM + 2 NMs with 4 GPUs each + the real
 * Python engine; one NM carries the exclusive label {@code gpu}, the other is in the default
 * partition. Queues root.a (default partition 50 %, {@code gpu} 75 %, default node-label
 * expression {@code gpu}) and root.b (50 %, {@code gpu} 25 %), maximum 100 % everywhere.
 *
 * <p>The cluster view reports each node's partition, the label's exclusivity, each app's
 * partition (a's asks name none: its queue's default expression applies) and accessible
 * labels, and the queues' guarantees and maxima per partition; a round leases a's app GPUs of
 * the {@code gpu} node only and b's default-partition app GPUs of the other node only (b asks
 * for more than its partition has and still gets none of the {@code gpu} node's free GPU).
 * The metrics source shows one record per partition with its GPUs, leases and waiting apps.
 * The RM refuses a grant of b's app on the {@code gpu} node's free GPU (RoundDriver.applyGrants
 * checks every grant by Partitions.mayUse).
 */
class PartitionsIT {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static ThemisMiniCluster mc;
  private static NodeId labeled;
  private static NodeId plain;

  @BeforeAll
  static void up() throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(4);
    conf.set(ThemisSettings.PYTHON_EXECUTABLE, ThemisMiniCluster.testPython());
    conf.setLong(ThemisSettings.LEASE_DURATION_MS, 600_000);
    conf.setLong(ThemisSettings.ROUND_INTERVAL_MS, 60_000);
    conf.setBoolean(YarnConfiguration.NODE_LABELS_ENABLED, true);
    File store = Files.createTempDirectory("themis-node-labels").toFile();
    store.deleteOnExit();
    conf.set(YarnConfiguration.FS_NODE_LABELS_STORE_ROOT_DIR, store.toURI().toString());
    String q = "yarn.scheduler.capacity.root.";
    conf.set(q + "queues", "a,b");
    conf.set(q + "accessible-node-labels.gpu.capacity", "100");
    conf.set(q + "a.capacity", "50");
    conf.set(q + "b.capacity", "50");
    conf.set(q + "a.accessible-node-labels.gpu.capacity", "75");
    conf.set(q + "b.accessible-node-labels.gpu.capacity", "25");
    conf.set(q + "a.default-node-label-expression", "gpu");
    for (String leaf : new String[] {"a", "b"}) {
      conf.set(q + leaf + ".maximum-capacity", "100");
      conf.set(q + leaf + ".accessible-node-labels", "gpu");
      conf.set(q + leaf + ".accessible-node-labels.gpu.maximum-capacity", "100");
      conf.set(q + leaf + ".user-limit-factor", "4");
    }
    mc = new ThemisMiniCluster("themis-partitions", 2, conf);
    // the exclusive label "gpu" on the first NM (centralized node labels, as `yarn rmadmin
    // -addToClusterNodeLabels gpu(exclusive=true)` and `-replaceLabelsOnNode` do)
    labeled = mc.nodes().get(0).getNodeID();
    plain = mc.nodes().get(1).getNodeID();
    mc.label(labeled, "gpu", true);
    mc.awaitEngine();
  }

  @AfterAll
  static void down() {
    if (mc != null) {
      mc.close();
    }
  }

  @Test
  void viewReportsPartitionsAndRoundsKeepToThem() throws Exception {
    ThemisRuntime rt = mc.scheduler().runtime();
    TestAm a = TestAm.start(mc, "user-a", "a");
    TestAm b = TestAm.start(mc, "user-b", "b");
    a.ask(3, 1); // no label expression: queue a's default, gpu
    b.ask(8, 1); // the default partition
    a.awaitAsked(mc, 3);
    b.awaitAsked(mc, 8);
    rt.driver().signal();
    a.awaitGpuContainers(3, 20_000);
    b.awaitGpuContainers(4, 20_000);
    a.pollFor(1000);
    b.pollFor(1000);

    JsonNode view = JSON.readTree(rt.cluster().lastView());
    assertEquals("[{\"partition\":\"gpu\",\"exclusive\":true}]",
        view.path("partitions").toString());
    for (JsonNode n : view.path("nodes")) {
      String id = n.path("node_id").asText();
      assertEquals(id.equals(labeled.toString()) ? "gpu" : "", n.path("partition").asText(),
          "partition of " + id);
    }
    JsonNode appA = app(view, a.appId);
    JsonNode appB = app(view, b.appId);
    assertEquals("gpu", appA.path("partition").asText());
    assertEquals("", appB.path("partition").asText());
    assertEquals("[\"gpu\"]", appA.path("accessible_partitions").toString());
    // default partition: 4 GPUs, 50 % each; label gpu: 4 GPUs, 75 % and 25 %
    assertEquals("[{\"queue\":\"root.a\",\"guaranteed_gpus\":2,\"max_gpus\":4,"
        + "\"partitions\":{\"gpu\":{\"guaranteed_gpus\":3,\"max_gpus\":4}}},"
        + "{\"queue\":\"root.b\",\"guaranteed_gpus\":2,\"max_gpus\":4,"
        + "\"partitions\":{\"gpu\":{\"guaranteed_gpus\":1,\"max_gpus\":4}}}]",
        view.path("queues").toString());

    // the round: a's app only on the gpu node, b's only on the default node
    for (Container c : a.gpuContainers()) {
      assertEquals(labeled, c.getNodeId(), "queue a's container outside partition gpu");
    }
    for (Container c : b.gpuContainers()) {
      assertEquals(plain, c.getNodeId(), "a default-partition container on the exclusive node");
    }
    assertEquals(3, a.gpuContainers().size());
    assertEquals(4, b.gpuContainers().size());
    assertEquals(Long.valueOf(1), rt.cluster().grantableGpus().get(labeled),
        "the gpu node's fourth GPU stays free: b may not use it, a asks no more");
    int seen = 0;
    for (Lease l : mc.scheduler().leases().snapshot()) {
      assertEquals(l.node().equals(labeled) ? "gpu" : "", l.partition(), l.toString());
      assertTrue(l.app().equals(a.appId) == l.node().equals(labeled), l.toString());
      seen++;
    }
    assertTrue(seen >= 2, "leases in both partitions");
    metricsPerPartition(mc.scheduler().leases().snapshot());

    // the RM refuses a grant outside the app's partition whatever the engine says: b's
    // default-partition app onto the exclusive node's free GPU
    long refused = rt.driver().grantsRefused();
    assertEquals(0, rt.driver().applyGrants("{\"grants\":[{\"app_id\":\"" + b.appId
        + "\",\"node_id\":\"" + labeled + "\",\"gpus\":1}]}"), "grant refused");
    assertEquals(refused + 1, rt.driver().grantsRefused());
    assertEquals(Long.valueOf(1), rt.cluster().grantableGpus().get(labeled));
    for (Lease l : mc.scheduler().leases().snapshot()) {
      assertFalse(l.app().equals(b.appId) && l.node().equals(labeled), l.toString());
    }
    a.finish();
    b.finish();
  }

  /**
   * docs/yarn.md, "Metrics": a record ThemisPartition per partition, the default partition
   * first (tag {@code <default>}), then the labels; gpu: 4 GPUs, 3 leased to a, 1 free, no app
   * asking; default: 4 GPUs, all 4 leased to b, which still asks. Read through JMX, as /jmx
   * serves it (record n shows as {@code tag.Partition.n}, {@code GpusTotal.n}, ...).
   */
  private static void metricsPerPartition(List<Lease> leases) throws Exception {
    MBeanServer mbs = ManagementFactory.getPlatformMBeanServer();
    Set<ObjectName> found = mbs.queryNames(
        new ObjectName("Hadoop:service=*,name=ThemisMetrics"), null);
    assertEquals(1, found.size(), found.toString());
    ObjectName name = found.iterator().next();
    long gpuLeases = 0;
    for (Lease l : leases) {
      gpuLeases += "gpu".equals(l.partition()) ? 1 : 0;
    }
    // JMX values are a snapshot cached up to the metrics period (10 s): poll
    ThemisMiniCluster.waitFor("metrics show the round's leases", 30_000,
        () -> num(mbs, name, "GpusLeased") == 7);
    assertEquals(ThemisMetrics.DEFAULT_PARTITION_TAG, mbs.getAttribute(name, "tag.Partition.1"));
    assertEquals("gpu", mbs.getAttribute(name, "tag.Partition.2"));
    assertFalse(hasAttribute(mbs, name, "tag.Partition.3"), "two partitions, two records");
    // the default partition
    assertEquals(4, num(mbs, name, "GpusTotal.1"));
    assertEquals(4, num(mbs, name, "GpusLeased.1"));
    assertEquals(0, num(mbs, name, "GpusFree.1"));
    assertEquals(leases.size() - gpuLeases, num(mbs, name, "LeasesActive.1"));
    assertEquals(1, num(mbs, name, "AppsWaiting.1"), "b still asks for 4 GPUs");
    // gpu
    assertEquals(4, num(mbs, name, "GpusTotal.2"));
    assertEquals(3, num(mbs, name, "GpusLeased.2"));
    assertEquals(1, num(mbs, name, "GpusFree.2"));
    assertEquals(gpuLeases, num(mbs, name, "LeasesActive.2"));
    assertEquals(0, num(mbs, name, "AppsWaiting.2"), "a got all it asked for");
    // the cluster's record sums them
    assertEquals(8, num(mbs, name, "GpusTotal"));
    assertEquals(1, num(mbs, name, "GpusFree"));
    assertEquals(leases.size(), num(mbs, name, "LeasesActive"));
    assertEquals(1, num(mbs, name, "AppsWaiting"));
  }

  private static long num(MBeanServer mbs, ObjectName name, String attr) {
    try {
      return ((Number) mbs.getAttribute(name, attr)).longValue();
    } catch (javax.management.JMException e) {
      throw new AssertionError("cannot read " + attr + " of " + name + ": " + e, e);
    }
  }

  private static boolean hasAttribute(MBeanServer mbs, ObjectName name, String attr)
      throws Exception {
    try {
      mbs.getAttribute(name, attr);
      return true;
    } catch (javax.management.AttributeNotFoundException e) {
      return false;
    }
  }

  private static JsonNode app(JsonNode view, ApplicationId id) {
    for (JsonNode x : view.path("apps")) {
      if (x.path("app_id").asText().equals(id.toString())) {
        return x;
      }
    }
    throw new AssertionError(id + " not in the view " + view);
  }
}
