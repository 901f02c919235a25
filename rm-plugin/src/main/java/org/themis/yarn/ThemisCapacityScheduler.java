package org.themis.yarn;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.api.protocolrecords.NMContainerStatus;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.RMApp;
import org.apache.hadoop.yarn.server.resourcemanager.rmcontainer.RMContainer;
import org.apache.hadoop.yarn.server.resourcemanager.rmnode.RMNode;
import org.apache.hadoop.yarn.server.resourcemanager.rmcontainer.RMContainerEventType;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerApplication;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.ApplicationSchedulingConfig;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.ContainerAllocationProposal;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.ResourceCommitRequest;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.SchedulerContainer;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerApp;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.AppAddedSchedulerEvent;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.AppAttemptRemovedSchedulerEvent;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.AppRemovedSchedulerEvent;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.NodeAddedSchedulerEvent;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.NodeRemovedSchedulerEvent;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.NodeUpdateSchedulerEvent;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.SchedulerEvent;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.SchedulerEventType;
import org.apache.hadoop.yarn.util.resource.DominantResourceCalculator;
import org.apache.hadoop.yarn.util.resource.ResourceUtils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.themis.yarn.engine.AgentGateway;
import org.themis.yarn.lease.LeaseRecovery;
import org.themis.yarn.lease.LeaseTable;

/**
 * CapacityScheduler that commits a container holding {@code yarn.io/gpu} only when its
 * (application, node) pair holds a live Themis lease with enough GPUs left on that node.
 * Everything else schedules exactly as in the base class.
 */
public class ThemisCapacityScheduler extends CapacityScheduler {
  private static final Logger LOG = LoggerFactory.getLogger(ThemisCapacityScheduler.class);
  /** YarnConfiguration.APPLICATION_PLACEMENT_TYPE_CLASS of Hadoop 3.4+ (3.3 has no such key). */
  static final String PLACEMENT_CLASS_KEY = "yarn.scheduler.app-placement-allocator.class";

  private final LeaseTable leases = new LeaseTable();
  private final Object gpuCommitLock = new Object();
  private final AtomicLong rejectedGpuProposals = new AtomicLong();
  private final AtomicLong committedGpuProposals = new AtomicLong();
  private final AtomicLong filteredGpuAsks = new AtomicLong();
  private volatile ThemisSettings settings;
  private volatile ThemisRuntime runtime;
  private volatile LeaseRecovery recovery;
  /** The value of PLACEMENT_CLASS_KEY after serviceInit (given to each app on Hadoop 3.3). */
  private volatile String placementClass;

  @Override
  public void serviceInit(Configuration conf) throws Exception {
    settings = ThemisSettings.from(conf);
    settings.checkAgentTlsFiles(); // refuse to start on a missing certificate, not later
    String placement = conf.get(PLACEMENT_CLASS_KEY);
    if (placement == null) {
      conf.set(PLACEMENT_CLASS_KEY,
          ThemisPlacementAllocator.class.getName());
    } else if (!placement.equals(ThemisPlacementAllocator.class.getName())) {
      LOG.warn("{}={} is not {}: GPU asks of apps without a lease may block nodes for other "
          + "apps (tryCommit still enforces leases)", PLACEMENT_CLASS_KEY,
          placement, ThemisPlacementAllocator.class.getName());
    }
    placementClass = conf.get(PLACEMENT_CLASS_KEY);
    super.serviceInit(conf);
    if (!(getResourceCalculator() instanceof DominantResourceCalculator)) {
      throw new IllegalArgumentException("Themis needs yarn.scheduler.capacity.resource-calculator="
          + DominantResourceCalculator.class.getName() + " in capacity-scheduler.xml, found "
          + getResourceCalculator().getClass().getName());
    }
    if (!ResourceUtils.getResourceTypes().containsKey(Gpus.GPU)) {
      throw new IllegalArgumentException("Themis needs the countable resource type " + Gpus.GPU
          + " declared in resource-types.xml (yarn.resource-types)");
    }
    runtime = new ThemisRuntime(this, settings, leases);
    recovery = new LeaseRecovery(this, settings, leases, conf);
    LOG.info("Themis scheduler initialised: fairness-knob={}, lease-duration-ms={}, "
        + "grace-period-ms={}, solver={}, engine-enabled={}", settings.fairnessKnob(),
        settings.leaseDurationMs(), settings.gracePeriodMs(), settings.solver(),
        settings.engineEnabled());
  }

  /**
   * The scheduler is one of the RM's active services: with RM HA every RM initialises it, but
   * only the RM that becomes active starts it, and an RM going standby stops it and replaces it
   * with a fresh, unstarted instance. So lease recovery, enforcement, the round driver, the
   * engine and its agents' endpoint run on the active RM only; a standby holds no lease.
   */
  @Override
  public void serviceStart() throws Exception {
    if (getRMContext() != null && getRMContext().isHAEnabled()) {
      LOG.info("Themis: this ResourceManager ({}) is becoming active: lease recovery, "
          + "enforcement, rounds and the engine start", getConfig() == null ? "?"
          : getConfig().get(ThemisSettings.RM_HA_ID, "?"));
    }
    recovery.start(); // RM restart: the RM recovered its apps, NMs have not re-registered yet
    super.serviceStart();
    runtime.start();
  }

  @Override
  public void serviceStop() throws Exception {
    ThemisRuntime rt = runtime;
    if (rt != null) {
      rt.stop();
    }
    LeaseRecovery rec = recovery;
    if (rec != null) {
      rec.stop();
    }
    super.serviceStop();
  }

  /**
   * Every container end passes here (completion, release, kill at lease expiry, attempt end,
   * node loss; CapacityScheduler calls {@code super.completedContainer} on some of these paths,
   * which would bypass an override of {@code completedContainer}). A GPU container's end may
   * end its app's lease early and frees GPUs: see {@link AgentGateway#gpuContainerEnded}.
   */
  @Override
  protected void completedContainerInternal(RMContainer rmContainer,
      ContainerStatus containerStatus, RMContainerEventType event) {
    super.completedContainerInternal(rmContainer, containerStatus, event);
    ThemisRuntime rt = runtime;
    if (rt != null && rmContainer != null && rmContainer.getAllocatedNode() != null
        && Gpus.of(rmContainer.getAllocatedResource()) > 0) {
      rt.agents().gpuContainerEnded(rmContainer.getApplicationAttemptId().getApplicationId(),
          rmContainer.getAllocatedNode());
    }
  }

  /**
   * After the base class: an app removed (finished, killed, failed) loses its leases now, and
   * so does a node removed (lost, shut down, decommissioned: {@link AgentGateway#nodeRemoved});
   * a node's heartbeat that left it more unallocated GPUs triggers a round.
   * Before it, on Hadoop 3.3 (no {@code PLACEMENT_CLASS_KEY}), a new app gets the placement
   * allocator as its scheduling env unless it set one itself, which is what 3.4+ do with the
   * key; the attempts created after this event copy the app's env.
   */
  @Override
  public void handle(SchedulerEvent event) {
    if (!HadoopLine.PLACEMENT_CLASS_FROM_CONF && event.getType() == SchedulerEventType.APP_ADDED
        && placementClass != null) {
      RMApp app = getRMContext().getRMApps()
          .get(((AppAddedSchedulerEvent) event).getApplicationId());
      if (app != null) {
        app.getApplicationSchedulingEnvs().putIfAbsent(
            ApplicationSchedulingConfig.ENV_APPLICATION_PLACEMENT_TYPE_CLASS, placementClass);
      }
    }
    NodeId adding = event.getType() == SchedulerEventType.NODE_ADDED
        ? ((NodeAddedSchedulerEvent) event).getAddedRMNode().getNodeID() : null;
    LeaseRecovery rec = recovery;
    if (adding != null && rec != null) {
      rec.nodeAdding(adding); // its GPUs are not grantable before its containers are in
    }
    FiCaSchedulerNode heartbeat = event.getType() == SchedulerEventType.NODE_UPDATE
        ? getNode(((NodeUpdateSchedulerEvent) event).getRMNode().getNodeID()) : null;
    long unallocatedBefore = heartbeat == null ? 0 : Gpus.of(heartbeat.getUnallocatedResource());
    try {
      super.handle(event);
    } finally {
      if (adding != null && rec != null) {
        rec.nodeAdded(adding);
      }
    }
    ThemisRuntime rt = runtime;
    if (rt != null && heartbeat != null
        && Gpus.of(heartbeat.getUnallocatedResource()) > unallocatedBefore) {
      // A container the RM ended while it ran on its node (killed, released by its AM, its
      // attempt ended) keeps its resources on the node until the NodeManager reports it gone
      // (YARN-4148), in a later heartbeat, on a path that passes no completedContainer hook:
      // its GPUs become free here, after the round their end triggered may have run.
      rt.driver().gpusFreed();
    }
    if (rt != null && adding != null) {
      FiCaSchedulerNode added = getNode(adding);
      if (added != null && Gpus.of(added.getUnallocatedResource()) > 0) {
        // A node that joins or rejoins (a restarted NodeManager, one back after it was lost)
        // brings free GPUs that no lease or container change announces.
        rt.driver().gpusFreed();
      }
    }
    if (rt != null && event.getType() == SchedulerEventType.APP_REMOVED) {
      rt.agents().appRemoved(((AppRemovedSchedulerEvent) event).getApplicationID());
    }
    if (rt != null && event.getType() == SchedulerEventType.NODE_REMOVED) {
      rt.agents().nodeRemoved(((NodeRemovedSchedulerEvent) event).getRemovedRMNode().getNodeID());
    }
    if (rt != null && event.getType() == SchedulerEventType.APP_ATTEMPT_REMOVED) {
      rt.agents().attemptEnded(((AppAttemptRemovedSchedulerEvent) event).getApplicationAttemptID());
    }
  }

  /**
   * A NodeManager (re-)registered with running containers (RM restart, work-preserving): after
   * the base class recovered them, every running GPU container gets a lease (LeaseRecovery).
   */
  @Override
  public void recoverContainersOnNode(List<NMContainerStatus> containerReports, RMNode nm) {
    super.recoverContainersOnNode(containerReports, nm);
    LeaseRecovery rec = recovery;
    if (rec != null && containerReports != null && !containerReports.isEmpty()) {
      rec.containersRecovered(nm.getNodeID());
    }
  }

  public LeaseTable leases() {
    return leases;
  }

  /** Work-preserving restart of the leases (docs/yarn.md, "Restart and HA"). */
  public LeaseRecovery recovery() {
    return recovery;
  }

  public ThemisSettings settings() {
    return settings;
  }

  public ThemisRuntime runtime() {
    return runtime;
  }

  public long rejectedGpuProposals() {
    return rejectedGpuProposals.get();
  }

  /** GPU asks skipped on a node by {@link ThemisPlacementAllocator} (no lease room). */
  public long filteredGpuAsks() {
    return filteredGpuAsks.get();
  }

  void countFilteredGpuAsk() {
    filteredGpuAsks.incrementAndGet();
  }

  public long committedGpuProposals() {
    return committedGpuProposals.get();
  }

  /**
   * GPUs held by {@code app}'s live containers on {@code node}. Reads the attempt's concurrent
   * container map without the attempt's lock: this runs inside the placement pre-check, which
   * holds the app's scheduling-info lock, while a committer may hold the attempt's write lock
   * and wait for that scheduling-info lock (a lock-order deadlock under async scheduling).
   */
  public long usedGpus(ApplicationId app, NodeId node) {
    SchedulerApplication<FiCaSchedulerApp> sa = getSchedulerApplications().get(app);
    if (sa == null || sa.getCurrentAppAttempt() == null) {
      return 0;
    }
    long sum = 0;
    for (RMContainer c : sa.getCurrentAppAttempt().getLiveContainersMap().values()) {
      if (node.equals(c.getAllocatedNode())) {
        sum += Gpus.of(c.getAllocatedResource());
      }
    }
    return sum;
  }

  @Override
  @SuppressWarnings({"rawtypes", "unchecked"})
  public boolean tryCommit(Resource cluster, ResourceCommitRequest r, boolean updatePending) {
    ResourceCommitRequest<FiCaSchedulerApp, FiCaSchedulerNode> request =
        (ResourceCommitRequest<FiCaSchedulerApp, FiCaSchedulerNode>) r;
    Map<AppNode, Long> asked = gpuAsks(request);
    if (asked.isEmpty()) {
      return super.tryCommit(cluster, r, updatePending);
    }
    // GPU proposals are checked and committed one at a time, so two proposals of the same app
    // (async scheduling) cannot both fit into the same lease.
    synchronized (gpuCommitLock) {
      String why = leaseViolation(asked);
      if (why == null) {
        boolean ok = super.tryCommit(cluster, r, updatePending);
        if (ok) {
          committedGpuProposals.incrementAndGet();
        }
        return ok;
      }
      rejectedGpuProposals.incrementAndGet();
      LOG.debug("Themis rejected GPU proposal: {}; proposal={}", why, request);
      rejectLikeBase(request);
      return false;
    }
  }

  /** What base tryCommit does for a refused proposal: give back the unconfirmed resource. */
  private void rejectLikeBase(ResourceCommitRequest<FiCaSchedulerApp, FiCaSchedulerNode> request) {
    List<ContainerAllocationProposal<FiCaSchedulerApp, FiCaSchedulerNode>> toAllocate =
        request.getContainersToAllocate();
    if (toAllocate == null || toAllocate.isEmpty() || !request.anythingAllocatedOrReserved()) {
      return;
    }
    ApplicationAttemptId attemptId = request.getFirstAllocatedOrReservedContainer()
        .getAllocatedOrReservedContainer().getSchedulerApplicationAttempt()
        .getApplicationAttemptId();
    FiCaSchedulerApp app = getApplicationAttempt(attemptId);
    if (app != null && attemptId.equals(app.getApplicationAttemptId())) {
      app.decUnconfirmedRes(request.getTotalAllocatedResource());
    }
  }

  private static final class AppNode {
    private final ApplicationId app;
    private final NodeId node;

    AppNode(ApplicationId app, NodeId node) {
      this.app = app;
      this.node = node;
    }

    ApplicationId app() {
      return app;
    }

    NodeId node() {
      return node;
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof AppNode && app.equals(((AppNode) o).app)
          && node.equals(((AppNode) o).node);
    }

    @Override
    public int hashCode() {
      return 31 * app.hashCode() + node.hashCode();
    }
  }

  private static Map<AppNode, Long> gpuAsks(
      ResourceCommitRequest<FiCaSchedulerApp, FiCaSchedulerNode> request) {
    Map<AppNode, Long> out = new HashMap<>();
    addAsks(out, request.getContainersToAllocate());
    addAsks(out, request.getContainersToReserve());
    return out;
  }

  private static void addAsks(Map<AppNode, Long> out,
      List<ContainerAllocationProposal<FiCaSchedulerApp, FiCaSchedulerNode>> proposals) {
    if (proposals == null) {
      return;
    }
    for (ContainerAllocationProposal<FiCaSchedulerApp, FiCaSchedulerNode> p : proposals) {
      long g = Gpus.of(p.getAllocatedOrReservedResource());
      if (g <= 0) {
        continue;
      }
      SchedulerContainer<FiCaSchedulerApp, FiCaSchedulerNode> sc =
          p.getAllocatedOrReservedContainer();
      ApplicationId app = sc.getSchedulerApplicationAttempt().getApplicationId();
      NodeId node = sc.getSchedulerNode().getNodeID();
      out.merge(new AppNode(app, node), g, Long::sum);
    }
  }

  private String leaseViolation(Map<AppNode, Long> asked) {
    for (Map.Entry<AppNode, Long> e : asked.entrySet()) {
      ApplicationId app = e.getKey().app();
      NodeId node = e.getKey().node();
      long live = leases.liveGpus(app, node);
      if (live <= 0) {
        return "no live lease for " + app + " on " + node;
      }
      long used = usedGpus(app, node);
      if (used + e.getValue() > live) {
        return app + " on " + node + " asks " + e.getValue() + " GPU(s), lease " + live
            + ", already used " + used;
      }
    }
    return null;
  }
}
