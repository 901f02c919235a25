package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerState;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.themis.yarn.lease.FsLeaseStore;
import org.themis.yarn.lease.Lease;
import org.themis.yarn.lease.LeaseStore;
import org.themis.yarn.lease.LeaseStores;
import org.themis.yarn.lease.StoredLeases;

/**
 * Work-preserving RM restart on a cluster with node labels (docs/yarn.md, "Partitions" and
 * "Restart and HA"): RmRestartIT's set-up (FileSystemRMStateStore, the file lease store, real
 * NodeManagers with 2 GPUs each, real containers, the real engine) plus centralized node
 * labels kept in a file-system label store: n0 in the exclusive label {@code gpu}, n1 in the
 * default partition; queue a may use {@code gpu} (its default label), queue b may not.
 *
 * <p>A lease that a round granted in {@code gpu} is written with its partition, comes back
 * after the restart with the same id and partition, and its container keeps running; the
 * first rounds of the restarted RM lease the rest of {@code gpu} only to an app of queue a: an
 * app of queue b asking for more than the default partition has gets n1's GPUs and none of
 * n0's free GPU.
 */
class RmRestartPartitionsIT {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String LABEL = "gpu";
  private static ThemisMiniCluster mc;
  private static LeaseStore check;
  private static NodeId labeled;
  private static NodeId plain;
  private final List<TestAm> apps = new ArrayList<>();

  @BeforeAll
  static void up() throws Exception {
    File dir = Files.createTempDirectory("themis-restart-labels").toFile();
    YarnConfiguration conf = RmRestartIT.restartConf(dir);
    conf.setBoolean(YarnConfiguration.NODE_LABELS_ENABLED, true);
    // the labels and their nodes outlive the RM in this store, as on a real cluster
    conf.set(YarnConfiguration.FS_NODE_LABELS_STORE_ROOT_DIR,
        new File(dir, "node-labels").toURI().toString());
    String q = "yarn.scheduler.capacity.root.";
    conf.set(q + "queues", "a,b");
    conf.set(q + "accessible-node-labels." + LABEL + ".capacity", "100");
    conf.set(q + "a.capacity", "50");
    conf.set(q + "b.capacity", "50");
    conf.set(q + "a.accessible-node-labels", LABEL);
    conf.set(q + "a.accessible-node-labels." + LABEL + ".capacity", "100");
    conf.set(q + "a.accessible-node-labels." + LABEL + ".maximum-capacity", "100");
    conf.set(q + "a.default-node-label-expression", LABEL);
    conf.set(q + "b.accessible-node-labels", " "); // a blank: the default partition only
    for (String leaf : new String[] {"a", "b"}) {
      conf.set(q + leaf + ".maximum-capacity", "100");
      conf.set(q + leaf + ".user-limit-factor", "4");
    }
    mc = new ThemisMiniCluster("themis-restart-labels", 2, conf);
    labeled = mc.nodeIds().get(0);
    plain = mc.nodeIds().get(1);
    mc.label(labeled, LABEL, true);
    mc.awaitEngine();
    check = new FsLeaseStore(conf, LeaseStores.fsDir(conf, ThemisSettings.from(conf)));
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

  @Test
  void aLeaseInALabeledPartitionSurvivesARestartAndItsPartitionStaysExclusive()
      throws Exception {
    ThemisCapacityScheduler s = mc.scheduler();
    assertTrue(s.recovery().enabled());
    // A (queue a: its default label gpu) gets one GPU of n0 from a real round and runs on it
    TestAm a = app("holder", "a");
    a.ask(1, 1);
    a.awaitAsked(mc, 1);
    s.runtime().driver().signal();
    a.awaitGpuContainers(1, 30_000);
    Container held = a.gpuContainers().get(0);
    assertEquals(labeled, held.getNodeId(), "queue a's GPU container outside partition gpu");
    a.launch(mc, held, "sleep 600");
    ThemisMiniCluster.waitFor(held.getId() + " running", 30_000,
        () -> mc.nmState(held.getId()) == ContainerState.RUNNING);
    Lease lease = only(s.leases().snapshot());
    assertEquals(a.appId, lease.app());
    assertEquals(labeled, lease.node());
    assertEquals(LABEL, lease.partition());
    long freeOnLabeled = 2 - lease.gpus();
    assertTrue(freeOnLabeled >= 1, "the round leased A more than it asked: " + lease);
    // the store holds the lease with its partition (read on its own, as the next RM will)
    assertTrue(s.recovery().flush(5000), "lease store write");
    StoredLeases stored = check.read();
    assertNotNull(stored);
    assertEquals(Collections.singletonList(lease), stored.leases());

    ThemisCapacityScheduler s2 = restart();
    // the node labels came back from their store: n0 is in gpu again
    assertEquals(LABEL, s2.runtime().cluster().nodePartitions().of(labeled));
    assertEquals("", s2.runtime().cluster().nodePartitions().of(plain));
    // the same lease (id, expiry, partition), its container still running and the RM's again
    assertEquals(Collections.singletonList(lease), s2.leases().snapshot());
    assertEquals(ContainerState.RUNNING, mc.nmState(held.getId()));
    ThemisMiniCluster.waitFor("A's container recovered by the new RM", 10_000,
        () -> s2.usedGpus(a.appId, labeled) == 1);
    assertEquals(Long.valueOf(freeOnLabeled), s2.runtime().cluster().grantableGpus()
        .get(labeled));

    // B (queue b, the default partition) asks for 3 GPUs: only n1's 2 are its to have
    TestAm b = app("other-work", "b");
    b.ask(3, 1);
    b.awaitAsked(mc, 3);
    long rounds = s2.runtime().driver().rounds();
    s2.runtime().driver().signal();
    b.awaitGpuContainers(2, 30_000);
    ThemisMiniCluster.waitFor("a round after B's ask", 10_000,
        () -> s2.runtime().driver().rounds() > rounds);
    b.pollFor(2000);
    assertEquals(2, b.gpuContainers().size(), "B: n1's 2 GPUs, none of n0's");
    for (Container c : b.gpuContainers()) {
      assertEquals(plain, c.getNodeId(), "a default-partition container on the exclusive node");
    }
    // the view the restarted RM sent: A's lease in gpu, B in the default partition
    JsonNode view = JSON.readTree(s2.runtime().cluster().lastView());
    boolean seen = false;
    for (JsonNode l : view.path("leases")) {
      if (l.path("lease_id").asLong(-1) == lease.id()) {
        assertEquals(LABEL, l.path("partition").asText(), l.toString());
        seen = true;
      }
    }
    assertTrue(seen, "A's restored lease in the view: " + view.path("leases"));
    assertEquals(Long.valueOf(freeOnLabeled), s2.runtime().cluster().grantableGpus()
        .get(labeled), "n0's free GPU went to an app outside partition gpu");

    // A2 (queue a) asks for one: the next round gives it n0's free GPU, in partition gpu
    TestAm a2 = app("gpu-user", "a");
    a2.ask(1, 1);
    a2.awaitAsked(mc, 1);
    s2.runtime().driver().signal();
    a2.awaitGpuContainers(1, 30_000);
    assertEquals(labeled, a2.gpuContainers().get(0).getNodeId());
    for (Lease l : s2.leases().snapshot()) {
      assertEquals(l.node().equals(labeled) ? LABEL : "", l.partition(), l.toString());
      assertTrue(l.app().equals(b.appId) == l.node().equals(plain), l.toString());
    }
    for (TestAm am : apps) {
      am.finish();
    }
  }

  // ------------------------------------------------------------------ helpers

  private TestAm app(String name, String queue) throws Exception {
    TestAm am = TestAm.start(mc, name, queue);
    apps.add(am);
    return am;
  }

  private static Lease only(List<Lease> leases) {
    assertEquals(1, leases.size(), leases.toString());
    return leases.get(0);
  }

  /** Restarts the RM (RmRestartIT's way); the new scheduler once its recovery settled. */
  private static ThemisCapacityScheduler restart() throws Exception {
    mc.cluster.restartResourceManager(0);
    ThemisCapacityScheduler s = mc.scheduler();
    ThemisMiniCluster.waitFor("NodeManagers back", 60_000,
        () -> mc.scheduler().getNodeTracker().nodeCount() == 2);
    awaitLabeled();
    ThemisMiniCluster.waitFor("lease recovery settled", 60_000, () -> s.recovery().settled());
    return s;
  }

  private static void awaitLabeled() throws InterruptedException {
    ThemisMiniCluster.waitFor("the scheduler's node in partition " + LABEL, 20_000, () -> {
      for (FiCaSchedulerNode n : mc.nodes()) {
        if (n.getNodeID().equals(labeled)) {
          return LABEL.equals(n.getPartition());
        }
      }
      return false;
    });
  }
}
