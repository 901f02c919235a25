package org.themis.yarn.round;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Predicate;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.NodeLabel;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.RMApp;
import org.apache.hadoop.yarn.server.resourcemanager.rmcontainer.RMContainer;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.AppSchedulingInfo;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerApplication;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CSQueue;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.PendingAsk;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerApp;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.placement.AppPlacementAllocator;
import org.apache.hadoop.yarn.server.scheduler.SchedulerRequestKey;
import org.themis.yarn.Gpus;
import org.themis.yarn.ThemisCapacityScheduler;
import org.themis.yarn.ThemisSettings;
import org.themis.yarn.lease.Lease;
import org.themis.yarn.lease.LeaseTable;

/**
 * The cluster's GPUs as the ResourceManager sees them now, read from the scheduler and the
 * lease table: per node, the GPUs no live lease and no running container holds (the GPUs a
 * round may offer, paper section 3.3.2); per app, its GPU asks and its GPUs in use; and the JSON
 * cluster view the round driver sends to the engine, with each node's, app's and lease's
 * partition (node label; docs/yarn.md, "Partitions").
 */
public final class ClusterView {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final ThemisCapacityScheduler scheduler;
  private final ThemisSettings settings;
  private final LeaseTable leases;
  private final Predicate<ApplicationId> hasAgent;
  private volatile String lastView = "";
  /** Lease id -> the expiry at which a round offered it for renewal (once per expiry). */
  private final Map<Long, Long> renewalOffered = new ConcurrentHashMap<>();
  /** The leases the last view built offered for renewal in place, per app and node. */
  private volatile Renewals renewing = Renewals.NONE;

  /** {@code hasAgent}: is the app's AM registered with the agents' endpoint? */
  public ClusterView(ThemisCapacityScheduler scheduler, ThemisSettings settings,
      LeaseTable leases, Predicate<ApplicationId> hasAgent) {
    this.scheduler = scheduler;
    this.settings = settings;
    this.leases = leases;
    this.hasAgent = hasAgent;
  }

  /** The last cluster view built (for diagnostics), sent or not. */
  public String lastView() {
    return lastView;
  }

  /** GPUs on each node that no live lease and no running container holds. */
  public Map<NodeId, Long> grantableGpus() {
    Map<NodeId, Long> out = new HashMap<>();
    long now = leases.now();
    // live leases by node, once (not a scan of every lease per node: O(nodes x leases))
    Map<NodeId, List<Lease>> liveOn = new HashMap<>();
    for (Lease l : leases.snapshot()) {
      if (l.isLive(now)) {
        liveOn.computeIfAbsent(l.node(), k -> new ArrayList<>()).add(l);
      }
    }
    for (FiCaSchedulerNode n : scheduler.getNodeTracker().getAllNodes()) {
      if (scheduler.recovery().nodeRecovering(n.getNodeID())) {
        out.put(n.getNodeID(), 0L); // (re-)registering: its containers are not in yet
        continue;
      }
      Map<ApplicationId, Long> used = new HashMap<>();
      for (RMContainer c : n.getCopiedListOfRunningContainers()) {
        long g = Gpus.of(c.getAllocatedResource());
        if (g > 0) {
          used.merge(c.getApplicationAttemptId().getApplicationId(), g, Long::sum);
        }
      }
      Map<ApplicationId, Long> leased = new HashMap<>();
      List<Lease> live = liveOn.get(n.getNodeID());
      for (Lease l : live == null ? Collections.<Lease>emptyList() : live) {
        leased.merge(l.app(), (long) l.gpus(), Long::sum);
      }
      long held = 0;
      for (ApplicationId a : union(used, leased)) {
        held += Math.max(used.getOrDefault(a, 0L), leased.getOrDefault(a, 0L));
      }
      long free = Math.min(Gpus.of(n.getTotalResource()) - held,
          Gpus.of(n.getUnallocatedResource()));
      out.put(n.getNodeID(), Math.max(0, free));
    }
    return out;
  }

  private static List<ApplicationId> union(Map<ApplicationId, Long> a, Map<ApplicationId, Long> b) {
    List<ApplicationId> out = new ArrayList<>(a.keySet());
    for (ApplicationId k : b.keySet()) {
      if (!a.containsKey(k)) {
        out.add(k);
      }
    }
    return out;
  }

  /**
   * Every running app's GPU asks (per container size: GPUs per container -> containers, summed
   * over its priorities and allocation ids) and GPUs of its live containers per node. Reads the
   * scheduling info's concurrent structures, not under the attempt's lock (docs/yarn.md).
   */
  public List<AppGpus> appGpus() {
    List<AppGpus> out = new ArrayList<>();
    for (Map.Entry<ApplicationId, SchedulerApplication<FiCaSchedulerApp>> e
        : scheduler.getSchedulerApplications().entrySet()) {
      FiCaSchedulerApp attempt = e.getValue().getCurrentAppAttempt();
      if (attempt == null || attempt.isStopped()) {
        continue;
      }
      // per partition its asks name (YARN already filled in the app's or queue's default
      // node-label expression): GPUs per container -> containers
      Map<String, TreeMap<Long, Long>> byPartition = new TreeMap<>();
      AppSchedulingInfo info = attempt.getAppSchedulingInfo();
      for (SchedulerRequestKey key : info.getSchedulerKeys()) {
        PendingAsk pa = info.getPendingAsk(key);
        long k = Gpus.of(pa.getPerAllocationResource());
        if (k > 0 && pa.getCount() > 0) {
          AppPlacementAllocator<FiCaSchedulerNode> placement = info.getAppPlacementAllocator(key);
          String p = Partitions.ofExpression(
              placement == null ? null : placement.getPrimaryRequestedNodePartition());
          byPartition.computeIfAbsent(p, x -> new TreeMap<>())
              .merge(k, (long) pa.getCount(), Long::sum);
        }
      }
      String partition = askedPartition(e.getKey(), e.getValue(), byPartition);
      TreeMap<Long, Long> asks = byPartition.containsKey(partition)
          ? byPartition.get(partition) : new TreeMap<Long, Long>();
      Map<NodeId, Long> running = new TreeMap<>();
      for (RMContainer c : attempt.getLiveContainersMap().values()) {
        long g = Gpus.of(c.getAllocatedResource());
        if (g > 0 && c.getAllocatedNode() != null) {
          running.merge(c.getAllocatedNode(), g, Long::sum);
        }
      }
      out.add(new AppGpus(e.getKey(), hasAgent.test(e.getKey()), asks, running, partition));
    }
    return out;
  }

  /**
   * The partition an app's GPUs are for (docs/yarn.md, "Partitions"): the one its GPU asks
   * name (of several, the one asking the most GPUs, then the first by name: a round leases an
   * app GPUs of one partition, and its asks elsewhere wait for a later round); an app without
   * GPU asks: the partition YARN would give its asks, that is its own node-label expression
   * (the submission's; "" the default partition), else, when it set none, its queue's
   * default-node-label-expression, else "".
   */
  private String askedPartition(ApplicationId app, SchedulerApplication<FiCaSchedulerApp> sa,
      Map<String, TreeMap<Long, Long>> byPartition) {
    String best = null;
    long bestGpus = -1;
    for (Map.Entry<String, TreeMap<Long, Long>> p : byPartition.entrySet()) {
      long g = 0;
      for (Map.Entry<Long, Long> k : p.getValue().entrySet()) {
        g += k.getKey() * k.getValue();
      }
      if (g > bestGpus) {
        best = p.getKey();
        bestGpus = g;
      }
    }
    if (best != null) {
      return best;
    }
    // as YARN fills in an ask's expression: the app's (from its submission; an explicit ""
    // is the default partition), else, when the app set none, its queue's default.
    // (RMApp.getAppNodeLabelExpression() would say "<Not set>" for none: not a partition.)
    RMApp rmApp = scheduler.getRMContext().getRMApps().get(app);
    String expr = rmApp == null || rmApp.getApplicationSubmissionContext() == null ? null
        : rmApp.getApplicationSubmissionContext().getNodeLabelExpression();
    if (NodeLabel.NODE_LABEL_EXPRESSION_NOT_SET.equals(expr)) {
      expr = null;
    }
    if (expr == null && sa.getQueue() instanceof CSQueue) {
      expr = ((CSQueue) sa.getQueue()).getDefaultNodeLabelExpression();
    }
    return Partitions.ofExpression(expr);
  }

  /** The nodes' partitions and which labels lend their idle GPUs (non-exclusive). */
  public NodePartitions nodePartitions() {
    Map<NodeId, String> of = new TreeMap<>();
    Map<NodeId, Long> totals = new TreeMap<>();
    for (FiCaSchedulerNode n : scheduler.getNodeTracker().getAllNodes()) {
      of.put(n.getNodeID(), Partitions.of(n));
      totals.put(n.getNodeID(), Gpus.of(n.getTotalResource()));
    }
    return new NodePartitions(of, Partitions.nonExclusive(
        Partitions.clusterLabels(scheduler.getRMContext().getNodeLabelManager())), totals);
  }

  /** The cluster's node labels (partitions besides the default), sorted; empty without. */
  public List<String> labelNames() {
    List<String> out = new ArrayList<>();
    for (NodeLabel l : Partitions.clusterLabels(scheduler.getRMContext().getNodeLabelManager())) {
      out.add(l.getName());
    }
    return out;
  }

  /** GPUs of the cluster's nodes. */
  public long clusterGpus() {
    long total = 0;
    for (FiCaSchedulerNode n : scheduler.getNodeTracker().getAllNodes()) {
      total += Gpus.of(n.getTotalResource());
    }
    return total;
  }

  /**
   * The leases a round may renew in place now (docs/yarn.md, "Renewal in place"): ACTIVE
   * leases of apps with a Themis agent that end within {@link ThemisSettings#renewAheadMs}
   * and were not offered for renewal at this expiry yet. Their GPUs are offered in the round
   * beside the free ones, and their holder asks for the containers that run on them: a grant
   * of such GPUs to the holder renews the lease (its jobs go on), a grant to another app
   * takes them when the lease ends.
   */
  private Renewals renewable(long now) {
    long ahead = settings.renewAheadMs();
    if (ahead <= 0) {
      return Renewals.NONE;
    }
    List<Lease> all = leases.snapshot();
    Set<Long> ids = new TreeSet<>();
    List<Lease> due = new ArrayList<>();
    for (Lease l : all) {
      ids.add(l.id());
      Long offered = renewalOffered.get(l.id());
      if (l.isLive(now) && l.expiryMs() - now <= ahead && hasAgent.test(l.app())
          && (offered == null || offered != l.expiryMs())) {
        due.add(l);
      }
    }
    renewalOffered.keySet().retainAll(ids);
    return due.isEmpty() ? Renewals.NONE : new Renewals(due, all, this::gpuContainers, now);
  }

  /** The app's live GPU containers on the node: GPUs of each, newest first. */
  private List<Long> gpuContainers(ApplicationId app, NodeId node) {
    SchedulerApplication<FiCaSchedulerApp> sa = scheduler.getSchedulerApplications().get(app);
    FiCaSchedulerApp attempt = sa == null ? null : sa.getCurrentAppAttempt();
    List<RMContainer> mine = new ArrayList<>();
    if (attempt != null) {
      for (RMContainer c : attempt.getLiveContainersMap().values()) {
        if (Gpus.of(c.getAllocatedResource()) > 0 && node.equals(c.getAllocatedNode())) {
          mine.add(c);
        }
      }
    }
    mine.sort((a, b) -> b.getContainerId().compareTo(a.getContainerId()));
    List<Long> out = new ArrayList<>();
    for (RMContainer c : mine) {
      out.add(Gpus.of(c.getAllocatedResource()));
    }
    return out;
  }

  /**
   * The leases the view last built offered for renewal, and marks them offered at their
   * expiry (the round driver calls it once the engine answered that view).
   */
  public Renewals takeRenewing() {
    Renewals r = renewing;
    renewing = Renewals.NONE;
    for (Lease l : r.leases()) {
      renewalOffered.put(l.id(), l.expiryMs());
    }
    return r;
  }

  /**
   * The JSON cluster view sent to the engine for round {@code roundId}: settings, nodes with
   * their free GPUs and partition, the cluster's node labels, apps with their asks and
   * partition, queues' GPU entitlements (per partition), leases. Null when there is
   * nothing to decide (no free GPU, or no app asks for one).
   */
  ObjectNode build(long roundId) {
    Map<NodeId, Long> free = grantableGpus();
    Renewals renew = renewable(leases.now());
    renewing = Renewals.NONE;
    long totalFree = free.values().stream().mapToLong(Long::longValue).sum() + renew.gpus();
    ObjectNode root = JSON.createObjectNode();
    root.put("round", roundId);
    root.put("now_ms", leases.now());
    root.put("fairness_knob", settings.fairnessKnob());
    root.put("lease_duration_ms", settings.leaseDurationMs());
    root.put("lease_spread_ms", settings.leaseSpreadMs());
    root.put("solver", settings.solver());
    ArrayNode nodes = root.putArray("nodes");
    Map<String, Long> partitionGpus = new TreeMap<>(); // partition -> GPUs of its nodes
    partitionGpus.put(Partitions.DEFAULT, 0L);
    for (FiCaSchedulerNode n : scheduler.getNodeTracker().getAllNodes()) {
      ObjectNode o = nodes.addObject();
      o.put("node_id", n.getNodeID().toString());
      o.put("host", n.getNodeID().getHost());
      o.put("rack", n.getRackName());
      o.put("total_gpus", Gpus.of(n.getTotalResource()));
      o.put("free_gpus", free.getOrDefault(n.getNodeID(), 0L));
      String p = Partitions.of(n);
      o.put("partition", p); // its node label: the engine runs a round per partition
      partitionGpus.merge(p, Gpus.of(n.getTotalResource()), Long::sum);
    }
    List<NodeLabel> labels =
        Partitions.clusterLabels(scheduler.getRMContext().getNodeLabelManager());
    Partitions.put(root, labels);
    ArrayNode apps = root.putArray("apps");
    long pendingTotal = 0;
    Map<String, CSQueue> queues = new TreeMap<>();
    for (AppGpus a : appGpus()) {
      ObjectNode o = apps.addObject();
      o.put("app_id", a.app().toString());
      String queue = QueueGpus.queueOf(scheduler, a.app(), queues);
      if (queue != null) {
        o.put("queue", queue); // the engine shares GPUs between leaf queues (docs/yarn.md)
      }
      o.put("partition", a.partition());
      Partitions.putAccessible(o, queue == null ? null : queues.get(queue));
      long pending = a.askedGpus();
      pendingTotal += pending + renew.askedGpus(a.app());
      o.put("pending_gpus", pending);
      // container shape: the leftover step deals whole containers on one node
      a.putGpuUse(o);
      renew.put(o, a.app()); // GPUs it may keep: renewed in place if it wins them back
    }
    QueueGpus.put(root, queues, partitionGpus, labels);
    ArrayNode ls = root.putArray("leases");
    for (Lease l : leases.snapshot()) {
      ObjectNode o = ls.addObject();
      o.put("lease_id", l.id());
      o.put("app_id", l.app().toString());
      o.put("node_id", l.node().toString());
      o.put("gpus", l.gpus());
      o.put("expiry_ms", l.expiryMs());
      o.put("state", l.state().name());
      o.put("partition", l.partition());
      if (renew.contains(l)) {
        o.put("renewing", true);
      }
    }
    lastView = root.toString();
    if (totalFree == 0 || pendingTotal == 0) {
      return null;
    }
    renewing = renew;
    return root;
  }
}
