package org.themis.yarn.engine;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.server.resourcemanager.RMContext;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.RMApp;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.attempt.RMAppAttempt;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerApplication;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerApp;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.themis.yarn.Gpus;
import org.themis.yarn.ThemisCapacityScheduler;
import org.themis.yarn.ThemisRuntime;
import org.themis.yarn.lease.Lease;
import org.themis.yarn.lease.LeaseTable;

/**
 * The apps' side of the plugin: which apps' AMs speak to the agents' endpoint (the engine's
 * gRPC service; paper section 4.1: the arbiter offers GPUs to the apps' agents, which bid),
 * what those AMs ask of the RM through the engine ({@link EngineSupervisor.AgentEvents}:
 * registration tokens, joins and leaves, their leases, GPUs given back), and the leases that
 * end before their expiry because of it: the app finished, a container of an app without an
 * agent ended, its AM left or gave GPUs back.
 */
public final class AgentGateway implements EngineSupervisor.AgentEvents {
  private static final Logger LOG = LoggerFactory.getLogger(AgentGateway.class);
  private static final ObjectMapper JSON = new ObjectMapper();

  private final ThemisRuntime runtime;
  private final ThemisCapacityScheduler scheduler;
  private final LeaseTable leases;
  /** Apps whose AM registered with the agents' endpoint: their AM gives GPUs back itself. */
  private final Set<ApplicationId> agentApps = ConcurrentHashMap.newKeySet();

  public AgentGateway(ThemisRuntime runtime) {
    this.runtime = runtime;
    this.scheduler = runtime.scheduler();
    this.leases = runtime.leases();
  }

  /** Is {@code app}'s AM registered with the agents' endpoint? */
  public boolean hasAgent(ApplicationId app) {
    return agentApps.contains(app);
  }

  /** The apps whose AM registered with the agents' endpoint (a copy; kept across restarts). */
  public Set<ApplicationId> agentApps() {
    return new TreeSet<>(agentApps);
  }

  /** Forgets the agents of apps the scheduler no longer knows (each enforcement pass). */
  public void forgetGoneApps() {
    agentApps.removeIf(a -> !scheduler.getSchedulerApplications().containsKey(a));
  }

  // ---------------------------------------------------------------- early lease ends

  /**
   * A GPU container ended (completed, released, killed, preempted). An app whose AM speaks to
   * the agents' endpoint keeps its leases (its AM starts its next job on them, or gives them
   * back with ReleaseGpus). An app without an agent cannot give GPUs back: when it asks for no
   * more GPUs, its leases on the node shrink to the GPUs its containers still use there.
   */
  public void gpuContainerEnded(ApplicationId app, NodeId node) {
    if (!agentApps.contains(app)) {
      SchedulerApplication<FiCaSchedulerApp> sa = scheduler.getSchedulerApplications().get(app);
      FiCaSchedulerApp attempt = sa == null ? null : sa.getCurrentAppAttempt();
      long pending = attempt == null ? 0
          : Gpus.of(attempt.getAppAttemptResourceUsage().getPending());
      if (pending == 0) {
        long extra = leases.liveGpus(app, node) - scheduler.usedGpus(app, node);
        if (extra > 0) {
          int ended = leases.shrink(app, node, (int) extra);
          runtime.countEndedEarly(ended);
          LOG.info("Themis: {} GPU(s) of {} on {} back from their lease (its container ended, "
              + "it asks for no more GPUs and has no agent)", ended, app, node);
        }
      }
    }
    runtime.driver().gpusFreed();
  }

  /**
   * YARN removed the node from the scheduler (LOST after the NodeManager liveness expiry,
   * shut down, decommissioned, or reconnected as a new node): its GPUs left the offer with
   * it, and every lease on it ends now (docs/yarn.md, "Faults"). Its containers were
   * completed by the base class before (each passed {@link #gpuContainerEnded}); an AM
   * learns of the node from its allocate response and drops its leases there too.
   */
  public void nodeRemoved(NodeId node) {
    long now = leases.now();
    List<Lease> ended = leases.removeNode(node);
    long gpus = 0;
    for (Lease l : ended) {
      if (l.isLive(now)) {
        gpus += l.gpus();
      }
    }
    if (!ended.isEmpty()) {
      runtime.countEndedEarly(gpus);
      LOG.info("Themis: node {} removed from the scheduler; its {} lease(s) end now ({} live "
          + "GPU(s))", node, ended.size(), gpus);
      runtime.driver().gpusFreed();
    }
  }

  /** The app finished (or was killed or failed): every lease of it ends now. */
  public void appRemoved(ApplicationId app) {
    runtime.engine().appEnded(app.toString()); // and its registration with the agents' endpoint
    agentApps.remove(app);
    runtime.metrics().appRemoved(app);
    long gpus = 0;
    for (Lease l : leases.snapshot()) {
      if (l.app().equals(app) && l.isLive(leases.now())) {
        gpus += l.gpus();
      }
    }
    int removed = leases.removeApp(app);
    if (removed > 0) {
      runtime.countEndedEarly(gpus);
      LOG.info("Themis: {} finished; its {} lease(s) end now ({} live GPU(s) back)", app,
          removed, gpus);
      runtime.driver().gpusFreed();
    }
  }

  /**
   * An attempt of the app ended (its AM exited, failed or stopped heart-beating and expired):
   * its AM's registration with the agents' endpoint ends, as if it had left (the next
   * attempt's AM registers again with its own AMRMToken).
   */
  public void attemptEnded(ApplicationAttemptId attempt) {
    String appId = attempt.getApplicationId().toString();
    runtime.engine().appEnded(appId);
    if (agentApps.contains(attempt.getApplicationId())) {
      agentLeft(appId);
    }
  }

  // ---------------------------------------------------------------- calls from the engine

  @Override
  public String verifyAmToken(String appId, String token) {
    RMContext ctx = scheduler.getRMContext();
    String why = AmTokens.check(appId, token, ctx.getAMRMTokenSecretManager(), id -> {
      RMApp app = ctx.getRMApps().get(id);
      if (app == null || app.isAppInCompletedStates()) {
        return null;
      }
      RMAppAttempt a = app.getCurrentAppAttempt();
      if (a == null) {
        return null;
      }
      switch (a.getAppAttemptState()) {
        case LAUNCHED:
        case RUNNING:
          return a.getAppAttemptId();
        default:
          return null;
      }
    });
    ObjectNode o = JSON.createObjectNode();
    o.put("ok", why == null);
    if (why != null) {
      o.put("error", why);
    }
    return o.toString();
  }

  @Override
  public void agentJoined(String appId) {
    ApplicationId app = parseApp(appId);
    if (app != null) {
      agentApps.add(app);
      scheduler.recovery().agentsChanged();
    }
  }

  /**
   * The app's AM left the agents' endpoint (UnregisterApp): nobody speaks for its leases any
   * more, so it is treated as an app without an agent from now on, and its leased GPUs that no
   * container of it uses go back now (those in use stay leased until their containers end).
   */
  @Override
  public void agentLeft(String appId) {
    ApplicationId app = parseApp(appId);
    if (app == null) {
      return;
    }
    agentApps.remove(app);
    scheduler.recovery().agentsChanged();
    Set<NodeId> nodes = new HashSet<>();
    for (Lease l : leases.snapshot()) {
      if (l.app().equals(app)) {
        nodes.add(l.node());
      }
    }
    int ended = 0;
    for (NodeId node : nodes) {
      long extra = leases.liveGpus(app, node) - scheduler.usedGpus(app, node);
      if (extra > 0) {
        ended += leases.shrink(app, node, (int) extra);
      }
    }
    runtime.countEndedEarly(ended);
    LOG.info("Themis: {} left the agents' endpoint; {} unused leased GPU(s) back", app, ended);
    if (ended > 0) {
      runtime.driver().gpusFreed();
    }
  }

  @Override
  public String appLeases(String appId) {
    ApplicationId app = parseApp(appId);
    ArrayNode out = JSON.createArrayNode();
    if (app == null) {
      return out.toString();
    }
    long now = leases.now();
    for (Lease l : leases.snapshot()) {
      if (l.app().equals(app) && l.state() == Lease.State.ACTIVE && l.expiryMs() > now) {
        ObjectNode o = out.addObject();
        o.put("node_id", l.node().toString());
        o.put("gpus", l.gpus());
        o.put("expiry_ms", l.expiryMs());
      }
    }
    return out.toString();
  }

  @Override
  public String releaseGpus(String appId, String gpuIdsJson) {
    ApplicationId app = parseApp(appId);
    if (app == null || !scheduler.getSchedulerApplications().containsKey(app)) {
      return error("unknown application " + appId);
    }
    Map<NodeId, Integer> perNode = new HashMap<>();
    Map<String, NodeId> nodes = new HashMap<>();
    for (FiCaSchedulerNode n : scheduler.getNodeTracker().getAllNodes()) {
      nodes.put(n.getNodeID().toString(), n.getNodeID());
    }
    try {
      for (JsonNode id : JSON.readTree(gpuIdsJson)) {
        String gpu = id.asText("");
        int slash = gpu.lastIndexOf('/');
        NodeId node = slash > 0 ? nodes.get(gpu.substring(0, slash)) : null;
        if (node == null) {
          return error("GPU id '" + gpu + "' names no node of the cluster (expected "
              + "<node_id>/<k>)");
        }
        perNode.merge(node, 1, Integer::sum);
      }
    } catch (java.io.IOException e) {
      return error("GPU ids are not a JSON array: " + gpuIdsJson);
    }
    int released = 0;
    for (Map.Entry<NodeId, Integer> e : perNode.entrySet()) {
      released += leases.shrink(app, e.getKey(), e.getValue());
    }
    runtime.countEndedEarly(released);
    LOG.info("Themis: {} gave back {} leased GPU(s) ({} asked: {})", app, released,
        perNode.values().stream().mapToInt(Integer::intValue).sum(), perNode);
    if (released > 0) {
      runtime.driver().gpusFreed();
    }
    ObjectNode ok = JSON.createObjectNode();
    ok.put("ok", true);
    ok.put("released", released);
    return ok.toString();
  }

  private static String error(String why) {
    ObjectNode o = JSON.createObjectNode();
    o.put("ok", false);
    o.put("error", why);
    return o.toString();
  }

  private static ApplicationId parseApp(String s) {
    try {
      return ApplicationId.fromString(s);
    } catch (IllegalArgumentException e) {
      return null;
    }
  }
}
