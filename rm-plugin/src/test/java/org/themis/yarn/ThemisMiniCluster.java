package org.themis.yarn;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.function.BooleanSupplier;
import org.apache.hadoop.util.VersionInfo;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerState;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.NodeLabel;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.resourcemanager.nodelabels.RMNodeLabelsManager;
import org.apache.hadoop.yarn.server.resourcemanager.rmnode.RMNodeEvent;
import org.apache.hadoop.yarn.server.resourcemanager.rmnode.RMNodeEventType;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;
import org.apache.hadoop.yarn.util.resource.ResourceUtils;

/** A real RM (ThemisCapacityScheduler) and NodeManagers exposing yarn.io/gpu, in one JVM. */
public final class ThemisMiniCluster implements AutoCloseable {
  final MiniYARNCluster cluster;
  final YarnConfiguration conf;
  final YarnClient client;
  private final int nodeManagers;

  /**
   * Base configuration: Themis scheduler, GPUs as a countable resource, and LeaseExpiryPolicy
   * listed as a scheduling monitor (optional: the scheduler enforces leases on its own thread;
   * listed here so that both enforce side by side; EnforcementWithoutMonitorIT unsets it).
   */
  static YarnConfiguration baseConf(int gpusPerNode) {
    YarnConfiguration conf = new YarnConfiguration();
    conf.set(YarnConfiguration.RM_SCHEDULER, ThemisCapacityScheduler.class.getName());
    conf.set("yarn.resource-types", Gpus.GPU);
    conf.set("yarn.nodemanager.resource-type." + Gpus.GPU, Integer.toString(gpusPerNode));
    conf.setInt(YarnConfiguration.NM_PMEM_MB, 4096);
    conf.setInt(YarnConfiguration.NM_VCORES, 8);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
    conf.setLong(YarnConfiguration.RM_NM_HEARTBEAT_INTERVAL_MS, 100);
    conf.setBoolean(YarnConfiguration.RM_SCHEDULER_ENABLE_MONITORS, true);
    conf.set(YarnConfiguration.RM_SCHEDULER_MONITOR_POLICIES, LeaseExpiryPolicy.class.getName());
    conf.setLong(ThemisSettings.MONITOR_INTERVAL_MS, 200);
    conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, false);
    conf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 99.5f);
    // A NodeManager's stop waits up to 10 s for its log handler's pending deletions (logs are
    // kept yarn.nodemanager.log.retain-seconds, 3 h by default) and up to sigkill delay +
    // process-kill-wait + 1 s for applications it still knows: 30-40 s of every cluster's
    // close with two NMs. No test reads container logs after its app ended.
    conf.setLong(YarnConfiguration.NM_LOG_RETAIN_SECONDS, 0);
    conf.setLong(YarnConfiguration.NM_PROCESS_KILL_WAIT_MS, 1000);
    // Hadoop 3.5's default, pinned: the plugin must hold up under asynchronous scheduling
    // (a lock-order deadlock in the placement pre-check showed up only with it on).
    conf.setBoolean("yarn.scheduler.capacity.schedule-asynchronously.enable", true);
    // Several mini-clusters may run at once (and CI may have 8642 taken): ephemeral port.
    conf.setInt(ThemisSettings.AGENT_PORT, 0);
    // Plaintext agents' endpoint, set explicitly (TLS is on by default and needs a PEM
    // certificate; AgentTlsSettingsTest and tests/unit/test_agent_auth.py cover TLS).
    conf.setBoolean(ThemisSettings.AGENT_TLS_ENABLED, false);
    // Tests talk to loopback only: the agents' endpoint on 127.0.0.1 (the default would be
    // the RM's hostname, which MiniYARNCluster sets to this machine's name).
    conf.set(ThemisSettings.AGENT_BIND_HOST, "127.0.0.1");
    return conf;
  }

  ThemisMiniCluster(String name, int nodeManagers, YarnConfiguration conf) throws Exception {
    this(name, 1, nodeManagers, conf);
  }

  /** With {@code resourceManagers} > 1: RM HA (ids rm0, rm1, ...; {@link #scheduler()} is the
   *  active RM's). */
  ThemisMiniCluster(String name, int resourceManagers, int nodeManagers, YarnConfiguration conf)
      throws Exception {
    this.conf = conf;
    this.nodeManagers = nodeManagers;
    ResourceUtils.resetResourceTypes(conf);
    cluster = new MiniYARNCluster(name, resourceManagers, nodeManagers, 1, 1);
    cluster.init(conf);
    cluster.start();
    if (!cluster.waitForNodeManagersToConnect(60_000)) {
      throw new IllegalStateException("NodeManagers did not register");
    }
    client = YarnClient.createYarnClient();
    client.init(cluster.getConfig());
    client.start();
    waitFor("nodes in scheduler with GPUs", 30_000,
        () -> nodes().size() == nodeManagers
            && nodes().stream().allMatch(n -> Gpus.of(n.getTotalResource()) == gpusPerNode()));
  }

  /**
   * Whether the RM's REST API ({@code /ws/v1/cluster}) answers in a mini-cluster: only from
   * Hadoop 3.5 on. The web apps of 3.3/3.4 (Jersey 1 behind Guice's GuiceFilter) share one
   * static Guice pipeline per JVM, and the NodeManagers start after the RM, so the RM's HTTP
   * port serves a NodeManager's {@code /ws/v1/node} and answers 404 for {@code /ws/v1/cluster}
   * (a real RM has a JVM of its own). The RM's {@code /jmx} servlet is outside that pipeline.
   */
  static boolean rmRestServed() {
    String[] v = VersionInfo.getVersion().split("\\.");
    int major = Integer.parseInt(v[0]);
    return major > 3 || major == 3 && Integer.parseInt(v[1]) >= 5;
  }

  int gpusPerNode() {
    return conf.getInt("yarn.nodemanager.resource-type." + Gpus.GPU, 0);
  }

  ThemisCapacityScheduler scheduler() {
    return (ThemisCapacityScheduler) cluster.getResourceManager().getResourceScheduler();
  }

  List<FiCaSchedulerNode> nodes() {
    return new ArrayList<>(scheduler().getNodeTracker().getAllNodes());
  }

  List<NodeId> nodeIds() {
    List<NodeId> out = new ArrayList<>();
    for (FiCaSchedulerNode n : nodes()) {
      out.add(n.getNodeID());
    }
    out.sort(null);
    return out;
  }

  /** The Python that runs the engine in tests: {@code $THEMIS_PYTHON}, else python3. */
  static String testPython() {
    return System.getenv().getOrDefault("THEMIS_PYTHON", "python3");
  }

  /**
   * Puts {@code node} in the node label {@code label} (added to the cluster with {@code
   * exclusive}), as {@code yarn rmadmin -addToClusterNodeLabels} and {@code
   * -replaceLabelsOnNode} do with centralized labels, and waits until the scheduler's node is
   * in that partition.
   */
  void label(NodeId node, String label, boolean exclusive) throws Exception {
    RMNodeLabelsManager labels = scheduler().getRMContext().getNodeLabelManager();
    labels.addToCluserNodeLabels(Collections.singletonList(NodeLabel.newInstance(label, exclusive)));
    labels.replaceLabelsOnNode(Collections.singletonMap(node, Collections.singleton(label)));
    waitFor("the scheduler's node in partition " + label, 20_000, () -> {
      for (FiCaSchedulerNode n : nodes()) {
        if (n.getNodeID().equals(node)) {
          return label.equals(n.getPartition());
        }
      }
      return false;
    });
  }

  /**
   * Declares {@code node} lost, as YARN's NodeManager liveness monitor does when a node stops
   * heart-beating (the EXPIRE event, through the RM's dispatcher). The NodeManager itself
   * heart-beats on, is told to resync and registers again within a heartbeat or two.
   */
  void expireNode(NodeId node) {
    cluster.getResourceManager().getRMContext().getDispatcher().getEventHandler()
        .handle(new RMNodeEvent(node, RMNodeEventType.EXPIRE));
  }

  /** Waits for the engine, which starts with the round driver (start-up is not measured). */
  void awaitEngine() throws InterruptedException {
    waitFor("engine up", 60_000, () -> scheduler().runtime().engine().pid() > 0);
  }

  /** The NodeManager's record of container {@code id}, null when no NodeManager has it. */
  org.apache.hadoop.yarn.server.nodemanager.containermanager.container.Container nmContainer(
      ContainerId id) {
    for (int i = 0; i < nodeManagers; i++) {
      org.apache.hadoop.yarn.server.nodemanager.containermanager.container.Container c =
          cluster.getNodeManager(i).getNMContext().getContainers().get(id);
      if (c != null) {
        return c;
      }
    }
    return null;
  }

  /** The container's state on its NodeManager, null when no NodeManager has it. */
  ContainerState nmState(ContainerId id) {
    org.apache.hadoop.yarn.server.nodemanager.containermanager.container.Container c = nmContainer(id);
    return c == null ? null : c.cloneAndGetContainerStatus().getState();
  }

  public static void waitFor(String what, long timeoutMs, BooleanSupplier cond) throws InterruptedException {
    long end = System.currentTimeMillis() + timeoutMs;
    while (!cond.getAsBoolean()) {
      if (System.currentTimeMillis() > end) {
        throw new AssertionError("timed out after " + timeoutMs + " ms waiting for " + what);
      }
      Thread.sleep(50);
    }
  }

  @Override
  public void close() {
    client.stop();
    cluster.stop();
  }
}
