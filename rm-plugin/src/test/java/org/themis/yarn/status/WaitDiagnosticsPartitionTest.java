package org.themis.yarn.status;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.junit.jupiter.api.Test;
import org.themis.yarn.ThemisSettings;
import org.themis.yarn.lease.Lease;
import org.themis.yarn.round.AppGpus;
import org.themis.yarn.round.NodePartitions;

/**
 * The wait diagnostics on a cluster with node labels (docs/yarn.md, "Partitions"): an app
 * counts as free only the GPUs of nodes that serve its partition, and is told which partition
 * it waits in; without labels the text is as before.
 */
class WaitDiagnosticsPartitionTest {
  private static final NodeId GPU_NODE = NodeId.newInstance("g1", 1);
  private static final NodeId PLAIN = NodeId.newInstance("p1", 1);
  private static final NodeId LENDER = NodeId.newInstance("s1", 1);
  private final WaitDiagnostics waits =
      new WaitDiagnostics(ThemisSettings.from(new Configuration()));

  private static AppGpus app(int n, String partition) {
    TreeMap<Long, Long> asks = new TreeMap<>();
    asks.put(1L, 2L);
    return new AppGpus(ApplicationId.newInstance(1, n), true, asks,
        Collections.<NodeId, Long>emptyMap(), partition);
  }

  /** g1 in the exclusive "gpu", s1 in the non-exclusive "shared", p1 in the default. */
  private static NodePartitions parts() {
    Map<NodeId, String> of = new HashMap<>();
    of.put(GPU_NODE, "gpu");
    of.put(LENDER, "shared");
    of.put(PLAIN, "");
    Map<NodeId, Long> totals = new HashMap<>();
    for (NodeId n : of.keySet()) {
      totals.put(n, 4L);
    }
    return new NodePartitions(of, Collections.singleton("shared"), totals);
  }

  private static Map<NodeId, Long> free(long gpuNode, long plain, long lender) {
    Map<NodeId, Long> m = new HashMap<>();
    m.put(GPU_NODE, gpuNode);
    m.put(PLAIN, plain);
    m.put(LENDER, lender);
    return m;
  }

  @Test
  void freeGpusOfAnotherPartitionAreNotOfferedToTheApp() {
    WaitDiagnostics.Reason r = waits.reason(app(1, "gpu"), 0, free(0, 4, 4), 12,
        Collections.<Lease>emptyList(), parts());
    assertEquals("all-leased", r.kind(), r.text());
    assertTrue(r.text().startsWith("Themis: waiting for GPUs in partition gpu: "), r.text());
    assertTrue(r.text().contains("all 4 GPUs it may use leased or in use"), r.text());
  }

  @Test
  void aDefaultAppCountsTheIdleGpusOfNonExclusivePartitions() {
    WaitDiagnostics.Reason r = waits.reason(app(2, ""), 0, free(4, 0, 2), 12,
        Collections.<Lease>emptyList(), parts());
    assertEquals("next-round", r.kind(), r.text());
    assertTrue(r.text().startsWith("Themis: waiting for GPUs in the default partition: "),
        r.text());
    assertTrue(r.text().contains("2 GPUs free (2 GPUs on s1:1)"), r.text());
  }

  @Test
  void withoutLabelsTheTextIsTheCluster() {
    WaitDiagnostics.Reason r = waits.reason(app(3, ""), 0, free(0, 0, 0), 12,
        Arrays.<Lease>asList(), NodePartitions.none());
    assertEquals("all-leased", r.kind());
    assertTrue(r.text().startsWith("Themis: waiting for GPUs: "), r.text());
    assertTrue(r.text().contains("all 12 GPUs of the cluster leased"), r.text());
  }

  /**
   * Between a lease granted and its containers allocated (the nodes' next heartbeats), an app
   * still asking is told where YARN places them; once its containers run and it asks nothing
   * more, an app without an agent is told it holds them. The mini-cluster test sees the first
   * only when a status update falls in that window, so the texts are checked here.
   */
  @Test
  void aLeasedAppIsPlacingItsContainersThenHoldsThem() {
    AppGpus asking = app(4, "");
    Lease lease = new Lease(1, asking.app(), PLAIN, 2, 0, 60_000, Lease.State.ACTIVE, 0);
    WaitDiagnostics.Reason r = waits.reason(asking, 10, free(0, 0, 0), 12,
        Arrays.asList(lease), NodePartitions.none());
    assertEquals("placing", r.kind(), r.text());
    assertTrue(r.text().startsWith("Themis: placing its containers: "), r.text());
    assertTrue(r.text().contains("leased to it: 2 GPUs on p1:1"), r.text());
    Map<NodeId, Long> running = new HashMap<>();
    running.put(PLAIN, 2L);
    AppGpus placed = new AppGpus(asking.app(), false, new TreeMap<Long, Long>(), running, "");
    WaitDiagnostics.Reason held = waits.reason(placed, 10, free(0, 0, 0), 12,
        Arrays.asList(lease), NodePartitions.none());
    assertEquals("holding", held.kind(), held.text());
    assertTrue(held.text().startsWith("Themis: holds 2 GPUs on p1:1 until "), held.text());
  }
}
