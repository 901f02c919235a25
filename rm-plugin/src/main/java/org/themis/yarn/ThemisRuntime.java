package org.themis.yarn;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.server.resourcemanager.rmcontainer.RMContainer;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerApplication;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerApp;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.ContainerPreemptEvent;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.SchedulerEventType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The plugin's moving parts inside the RM: lease enforcement (called by the edit policy), the
 * round driver thread (cluster view out, validated grants in) and the engine supervisor.
 */
public final class ThemisRuntime {
  private static final Logger LOG = LoggerFactory.getLogger(ThemisRuntime.class);
  private static final ObjectMapper JSON = new ObjectMapper();

  private final ThemisCapacityScheduler scheduler;
  private final ThemisSettings settings;
  private final LeaseTable leases;
  private final EngineSupervisor engine;
  private final ReentrantLock lock = new ReentrantLock();
  private final Condition wake = lock.newCondition();
  private boolean signalled;
  private volatile boolean running;
  private Thread roundThread;
  private final AtomicLong rounds = new AtomicLong();
  private final AtomicLong grantsApplied = new AtomicLong();
  private final AtomicLong grantsRefused = new AtomicLong();
  private final AtomicLong preemptMarks = new AtomicLong();
  private final AtomicLong killMarks = new AtomicLong();
  private volatile String lastView = "";

  ThemisRuntime(ThemisCapacityScheduler scheduler, ThemisSettings settings, LeaseTable leases) {
    this.scheduler = scheduler;
    this.settings = settings;
    this.leases = leases;
    this.engine = new EngineSupervisor(settings);
  }

  void start() {
    running = true;
    if (!settings.engineEnabled()) {
      LOG.warn("Themis engine disabled ({}=false): no rounds run; leases only change through the "
          + "Java API", ThemisSettings.ENGINE_ENABLED);
      return;
    }
    roundThread = new Thread(this::roundLoop, "themis-round-driver");
    roundThread.setDaemon(true);
    roundThread.start();
  }

  void stop() {
    running = false;
    signal();
    Thread t = roundThread;
    if (t != null) {
      t.interrupt();
      try {
        t.join(5000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    engine.stop();
  }

  public EngineSupervisor engine() { return engine; }
  public long rounds() { return rounds.get(); }
  public long grantsApplied() { return grantsApplied.get(); }
  public long grantsRefused() { return grantsRefused.get(); }
  public long preemptMarks() { return preemptMarks.get(); }
  public long killMarks() { return killMarks.get(); }
  /** The last cluster view built (for diagnostics), sent or not. */
  public String lastView() { return lastView; }

  /** Ask the round driver to look at the cluster now (freed GPUs, new demand). */
  public void signal() {
    lock.lock();
    try {
      signalled = true;
      wake.signalAll();
    } finally {
      lock.unlock();
    }
  }

  // ---------------------------------------------------------------- lease enforcement

  /** Expiry: preempt at expiry, kill after the grace period, drop leases of finished apps. */
  public void enforceLeases() {
    boolean changed = false;
    for (Lease l : leases.snapshot()) {
      if (!scheduler.getSchedulerApplications().containsKey(l.app())) {
        leases.remove(l.id());
        changed = true;
      }
    }
    for (Lease l : leases.expireDue(settings.gracePeriodMs())) {
      List<RMContainer> victims = containersOverLease(l.app(), l.node());
      LOG.info("Themis lease {} expired ({} GPU(s) of {} on {}); preempting {} container(s)",
          l.id(), l.gpus(), l.app(), l.node(), victims.size());
      if (victims.isEmpty()) {
        leases.remove(l.id());
      }
      for (RMContainer c : victims) {
        send(c, SchedulerEventType.MARK_CONTAINER_FOR_PREEMPTION);
        preemptMarks.incrementAndGet();
      }
      changed = true;
    }
    for (Lease l : leases.removeGraceOver()) {
      List<RMContainer> victims = containersOverLease(l.app(), l.node());
      if (!victims.isEmpty()) {
        LOG.info("Themis lease {} grace period over; killing {} container(s) of {} on {}",
            l.id(), victims.size(), l.app(), l.node());
      }
      for (RMContainer c : victims) {
        send(c, SchedulerEventType.MARK_CONTAINER_FOR_KILLABLE);
        killMarks.incrementAndGet();
      }
      changed = true;
    }
    if (changed) {
      signal();
    }
  }

  private void send(RMContainer c, SchedulerEventType type) {
    ApplicationAttemptId attempt = c.getApplicationAttemptId();
    scheduler.getRMContext().getDispatcher().getEventHandler()
        .handle(new ContainerPreemptEvent(attempt, c, type));
  }

  /** The app's GPU containers on the node beyond what its live leases cover, newest first. */
  List<RMContainer> containersOverLease(ApplicationId app, NodeId node) {
    SchedulerApplication<FiCaSchedulerApp> sa = scheduler.getSchedulerApplications().get(app);
    List<RMContainer> out = new ArrayList<>();
    if (sa == null || sa.getCurrentAppAttempt() == null) {
      return out;
    }
    List<RMContainer> gpuContainers = new ArrayList<>();
    long used = 0;
    for (RMContainer c : sa.getCurrentAppAttempt().getLiveContainersMap().values()) {
      long g = Gpus.of(c.getAllocatedResource());
      if (g > 0 && node.equals(c.getAllocatedNode())) {
        gpuContainers.add(c);
        used += g;
      }
    }
    long excess = used - leases.liveGpus(app, node);
    gpuContainers.sort(Comparator.comparing(RMContainer::getContainerId).reversed());
    for (RMContainer c : gpuContainers) {
      if (excess <= 0) {
        break;
      }
      out.add(c);
      excess -= Gpus.of(c.getAllocatedResource());
    }
    return out;
  }

  // ---------------------------------------------------------------- cluster view and rounds

  /** GPUs on each node that no live lease and no running container holds. */
  public Map<NodeId, Long> grantableGpus() {
    Map<NodeId, Long> out = new HashMap<>();
    List<Lease> snapshot = leases.snapshot();
    long now = leases.now();
    for (FiCaSchedulerNode n : scheduler.getNodeTracker().getAllNodes()) {
      Map<ApplicationId, Long> used = new HashMap<>();
      for (RMContainer c : n.getCopiedListOfRunningContainers()) {
        long g = Gpus.of(c.getAllocatedResource());
        if (g > 0) {
          used.merge(c.getApplicationAttemptId().getApplicationId(), g, Long::sum);
        }
      }
      Map<ApplicationId, Long> leased = new HashMap<>();
      for (Lease l : snapshot) {
        if (l.node().equals(n.getNodeID()) && l.isLive(now)) {
          leased.merge(l.app(), (long) l.gpus(), Long::sum);
        }
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

  /** The JSON cluster view sent to the engine; null when there is nothing to decide. */
  ObjectNode clusterView(long roundId) {
    Map<NodeId, Long> free = grantableGpus();
    long totalFree = free.values().stream().mapToLong(Long::longValue).sum();
    ObjectNode root = JSON.createObjectNode();
    root.put("round", roundId);
    root.put("now_ms", leases.now());
    root.put("fairness_knob", settings.fairnessKnob());
    root.put("lease_duration_ms", settings.leaseDurationMs());
    root.put("solver", settings.solver());
    ArrayNode nodes = root.putArray("nodes");
    for (FiCaSchedulerNode n : scheduler.getNodeTracker().getAllNodes()) {
      ObjectNode o = nodes.addObject();
      o.put("node_id", n.getNodeID().toString());
      o.put("host", n.getNodeID().getHost());
      o.put("rack", n.getRackName());
      o.put("total_gpus", Gpus.of(n.getTotalResource()));
      o.put("free_gpus", free.getOrDefault(n.getNodeID(), 0L));
    }
    ArrayNode apps = root.putArray("apps");
    long pendingTotal = 0;
    for (Map.Entry<ApplicationId, SchedulerApplication<FiCaSchedulerApp>> e
        : scheduler.getSchedulerApplications().entrySet()) {
      FiCaSchedulerApp attempt = e.getValue().getCurrentAppAttempt();
      if (attempt == null || attempt.isStopped()) {
        continue;
      }
      ObjectNode o = apps.addObject();
      o.put("app_id", e.getKey().toString());
      o.put("queue", attempt.getQueueName());
      o.put("user", attempt.getUser());
      long pending = Gpus.of(attempt.getAppAttemptResourceUsage().getPending());
      pendingTotal += pending;
      o.put("pending_gpus", pending);
      ObjectNode running = o.putObject("running_gpus");
      for (RMContainer c : attempt.getLiveContainersMap().values()) {
        long g = Gpus.of(c.getAllocatedResource());
        if (g > 0) {
          String k = c.getAllocatedNode().toString();
          running.put(k, running.path(k).asLong(0) + g);
        }
      }
    }
    ArrayNode ls = root.putArray("leases");
    for (Lease l : leases.snapshot()) {
      ObjectNode o = ls.addObject();
      o.put("lease_id", l.id());
      o.put("app_id", l.app().toString());
      o.put("node_id", l.node().toString());
      o.put("gpus", l.gpus());
      o.put("expiry_ms", l.expiryMs());
      o.put("state", l.state().name());
    }
    lastView = root.toString();
    if (totalFree == 0 || pendingTotal == 0) {
      return null;
    }
    return root;
  }

  private void roundLoop() {
    // Start the engine now, not at the first round: AMs register with its agents' endpoint
    // before they ask for GPUs (an app in a round without its agent would be granted leases
    // it never hears of).
    engine.health();
    while (running) {
      lock.lock();
      try {
        if (!signalled) {
          wake.await(settings.roundIntervalMs(), TimeUnit.MILLISECONDS);
        }
        signalled = false;
      } catch (InterruptedException e) {
        if (!running) {
          return;
        }
      } finally {
        lock.unlock();
      }
      if (!running) {
        return;
      }
      try {
        runOneRound();
      } catch (RuntimeException e) {
        LOG.error("Themis round failed; leases unchanged", e);
      }
    }
  }

  /** Runs one round if there is something to decide. Returns the number of grants applied. */
  public int runOneRound() {
    long id = rounds.get() + 1;
    ObjectNode view = clusterView(id);
    if (view == null) {
      return 0;
    }
    Optional<String> reply = engine.runRound(view.toString());
    if (reply.isEmpty()) {
      return 0;
    }
    rounds.incrementAndGet();
    int applied = applyGrants(reply.get());
    if (applied > 0) {
      LOG.info("Themis round {} applied {} lease grant(s)", id, applied);
    }
    return applied;
  }

  /**
   * Validates the engine's grants against the free GPUs as they are now and applies the valid
   * ones. A grant for an unknown app or node, or for more GPUs than are free, is refused whole.
   */
  int applyGrants(String replyJson) {
    JsonNode reply;
    try {
      reply = JSON.readTree(replyJson);
    } catch (java.io.IOException e) {
      LOG.error("Themis engine sent malformed JSON; no grants applied: {}", replyJson, e);
      return 0;
    }
    JsonNode grants = reply.path("grants");
    if (!grants.isArray()) {
      LOG.error("Themis engine reply has no 'grants' array; no grants applied: {}", replyJson);
      return 0;
    }
    synchronized (this) {
      Map<NodeId, Long> free = grantableGpus();
      Map<String, NodeId> nodesByName = new HashMap<>();
      for (NodeId n : free.keySet()) {
        nodesByName.put(n.toString(), n);
      }
      int applied = 0;
      for (JsonNode g : grants) {
        String appStr = g.path("app_id").asText("");
        String nodeStr = g.path("node_id").asText("");
        long gpus = g.path("gpus").asLong(0);
        NodeId node = nodesByName.get(nodeStr);
        ApplicationId app = parseApp(appStr);
        String why = null;
        if (app == null || !scheduler.getSchedulerApplications().containsKey(app)) {
          why = "unknown application";
        } else if (node == null) {
          why = "unknown node";
        } else if (gpus <= 0) {
          why = "non-positive GPU count";
        } else if (gpus > free.getOrDefault(node, 0L)) {
          why = "only " + free.getOrDefault(node, 0L) + " GPU(s) free";
        }
        if (why != null) {
          grantsRefused.incrementAndGet();
          LOG.warn("Themis refused grant {}: {}", g, why);
          continue;
        }
        free.put(node, free.get(node) - gpus);
        Lease l = leases.grant(app, node, (int) gpus, settings.leaseDurationMs());
        grantsApplied.incrementAndGet();
        applied++;
        LOG.info("Themis lease {}: {} GPU(s) on {} to {} until {}", l.id(), gpus, node, app,
            l.expiryMs());
      }
      return applied;
    }
  }

  private static ApplicationId parseApp(String s) {
    try {
      return ApplicationId.fromString(s);
    } catch (IllegalArgumentException e) {
      return null;
    }
  }
}
