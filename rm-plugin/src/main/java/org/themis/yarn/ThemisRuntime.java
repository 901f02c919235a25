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
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import javax.management.ObjectName;
import org.apache.hadoop.metrics2.util.MBeans;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.server.resourcemanager.rmcontainer.RMContainer;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.AppSchedulingInfo;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerApplication;
import org.apache.hadoop.yarn.server.scheduler.SchedulerRequestKey;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.PendingAsk;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerApp;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.ContainerPreemptEvent;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.SchedulerEventType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.themis.yarn.WaitDiagnostics.AppGpus;

/**
 * The plugin's moving parts inside the RM: lease enforcement (its own thread, whatever the
 * scheduling-monitor keys say) with the stock-app policy, the round driver thread (cluster view
 * out, validated grants in, apps' wait diagnostics), early lease ends (app finished, container
 * of an agent-less app ended, GPUs released by an AM), the engine supervisor and the read-only
 * status bean ({@code Hadoop:service=ResourceManager,name=Themis} in the RM's {@code /jmx}).
 */
public final class ThemisRuntime implements EngineSupervisor.AgentEvents, ThemisStatusMXBean {
  private static final Logger LOG = LoggerFactory.getLogger(ThemisRuntime.class);
  private static final ObjectMapper JSON = new ObjectMapper();

  private final ThemisCapacityScheduler scheduler;
  private final ThemisSettings settings;
  private final LeaseTable leases;
  private final EngineSupervisor engine;
  private final ReentrantLock lock = new ReentrantLock();
  private final Condition wake = lock.newCondition();
  private boolean signalled;
  /** When a round is due because GPUs were freed (0: none); guarded by {@link #lock}. */
  private long freedRoundAtMs;
  private volatile boolean running;
  private Thread roundThread;
  private ScheduledExecutorService enforcer;
  private final Object enforceLock = new Object();
  /** Apps whose AM registered with the agents' endpoint: their AM gives GPUs back itself. */
  private final Set<ApplicationId> agentApps = ConcurrentHashMap.newKeySet();
  private final AtomicLong gpusEndedEarly = new AtomicLong();
  private final AtomicLong enforcementPasses = new AtomicLong();
  private final AtomicLong rounds = new AtomicLong();
  private final AtomicLong grantsApplied = new AtomicLong();
  private final AtomicLong grantsRefused = new AtomicLong();
  private final AtomicLong preemptMarks = new AtomicLong();
  private final AtomicLong killMarks = new AtomicLong();
  private final AtomicLong renewals = new AtomicLong();
  /** Leases whose max hold was reached (logged once each). */
  private final Set<Long> holdOver = ConcurrentHashMap.newKeySet();
  private final WaitDiagnostics waits;
  private final ThemisMetrics metrics;
  private volatile ObjectName statusBean;
  private volatile String lastView = "";

  ThemisRuntime(ThemisCapacityScheduler scheduler, ThemisSettings settings, LeaseTable leases) {
    this.scheduler = scheduler;
    this.settings = settings;
    this.leases = leases;
    this.engine = new EngineSupervisor(settings, this);
    this.waits = new WaitDiagnostics(settings);
    this.metrics = new ThemisMetrics(this, leases, settings);
  }

  void start() {
    running = true;
    // Lease enforcement runs here, not only through LeaseExpiryPolicy: the RM's scheduling
    // monitors run only when yarn.resourcemanager.scheduler.monitor.enable/.policies say so,
    // and an admin "yarn rmadmin -refreshQueues" re-reads those keys and stops a policy that
    // is no longer listed. A lease must be enforced whatever they say (docs/yarn.md).
    enforcer = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "themis-lease-enforcer");
      t.setDaemon(true);
      return t;
    });
    enforcer.scheduleWithFixedDelay(this::enforceLeasesSafely, settings.monitorIntervalMs(),
        settings.monitorIntervalMs(), TimeUnit.MILLISECONDS);
    LOG.info("Themis lease enforcement every {} ms (built in; {} in the monitor policies is "
        + "optional); apps without a Themis agent: {}={}, {}={} ms",
        settings.monitorIntervalMs(), LeaseExpiryPolicy.class.getName(),
        ThemisSettings.STOCK_APP_POLICY, settings.stockAppPolicy().name().toLowerCase(),
        ThemisSettings.STOCK_APP_MAX_HOLD_MS, settings.stockAppMaxHoldMs());
    // read-only status (leases, asks, wait reasons) in the RM's /jmx; a second RM in the same
    // JVM (tests) logs a warning and goes without
    statusBean = MBeans.register("ResourceManager", "Themis", this);
    // metrics2 source (Hadoop:service=ResourceManager,name=ThemisMetrics, any metrics2 sink)
    metrics.register();
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
    ObjectName bean = statusBean;
    if (bean != null) {
      MBeans.unregister(bean);
      statusBean = null;
    }
    metrics.unregister();
    ScheduledExecutorService ex = enforcer;
    if (ex != null) {
      ex.shutdownNow();
    }
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
  /** Started and not stopped: on the active RM only (with RM HA a standby never starts it). */
  public boolean running() { return running; }
  /** The metrics2 source (docs/yarn.md, Metrics). */
  ThemisMetrics metrics() { return metrics; }
  public long rounds() { return rounds.get(); }
  public long grantsApplied() { return grantsApplied.get(); }
  public long grantsRefused() { return grantsRefused.get(); }
  public long preemptMarks() { return preemptMarks.get(); }
  public long killMarks() { return killMarks.get(); }
  /** Lease renewals under the stock-app policy {@code hold}. */
  public long renewals() { return renewals.get(); }
  /** GPUs whose lease ended before its expiry (app finished, container ended, AM release). */
  public long gpusEndedEarly() { return gpusEndedEarly.get(); }
  /** Completed lease-enforcement passes (built-in thread and LeaseExpiryPolicy together). */
  public long enforcementPasses() { return enforcementPasses.get(); }
  /** Is {@code app}'s AM registered with the agents' endpoint? */
  public boolean hasAgent(ApplicationId app) { return agentApps.contains(app); }
  /** The apps whose AM registered with the agents' endpoint (a copy; kept across restarts). */
  Set<ApplicationId> agentApps() { return new java.util.TreeSet<>(agentApps); }
  /** The last cluster view built (for diagnostics), sent or not. */
  public String lastView() { return lastView; }

  /** Ask the round driver to look at the cluster now. */
  public void signal() {
    lock.lock();
    try {
      signalled = true;
      wake.signalAll();
    } finally {
      lock.unlock();
    }
  }

  /**
   * GPUs were freed: a round runs {@code freed-round-delay-ms} after the first of a burst of
   * such events (one round for a burst of completions), if some app waits for GPUs then.
   */
  public void gpusFreed() {
    lock.lock();
    try {
      metrics.gpusFreed(leases.now());
      if (freedRoundAtMs == 0) {
        freedRoundAtMs = System.currentTimeMillis() + settings.freedRoundDelayMs();
        wake.signalAll();
      }
    } finally {
      lock.unlock();
    }
  }

  // ---------------------------------------------------------------- early lease ends

  /**
   * A GPU container ended (completed, released, killed, preempted). An app whose AM speaks to
   * the agents' endpoint keeps its leases (its AM starts its next job on them, or gives them
   * back with ReleaseGpus). An app without an agent cannot give GPUs back: when it asks for no
   * more GPUs, its leases on the node shrink to the GPUs its containers still use there.
   */
  void gpuContainerEnded(ApplicationId app, NodeId node) {
    if (!agentApps.contains(app)) {
      SchedulerApplication<FiCaSchedulerApp> sa = scheduler.getSchedulerApplications().get(app);
      FiCaSchedulerApp attempt = sa == null ? null : sa.getCurrentAppAttempt();
      long pending = attempt == null ? 0 : Gpus.of(attempt.getAppAttemptResourceUsage().getPending());
      if (pending == 0) {
        long extra = leases.liveGpus(app, node) - scheduler.usedGpus(app, node);
        if (extra > 0) {
          int ended = leases.shrink(app, node, (int) extra);
          gpusEndedEarly.addAndGet(ended);
          LOG.info("Themis: {} GPU(s) of {} on {} back from their lease (its container ended, "
              + "it asks for no more GPUs and has no agent)", ended, app, node);
        }
      }
    }
    gpusFreed();
  }

  /** The app finished (or was killed or failed): every lease of it ends now. */
  void appRemoved(ApplicationId app) {
    engine.appEnded(app.toString()); // and its registration with the agents' endpoint
    agentApps.remove(app);
    metrics.appRemoved(app);
    endAllLeases(app, "finished");
  }

  private void endAllLeases(ApplicationId app, String why) {
    long gpus = 0;
    for (Lease l : leases.snapshot()) {
      if (l.app().equals(app) && l.isLive(leases.now())) {
        gpus += l.gpus();
      }
    }
    int removed = leases.removeApp(app);
    if (removed > 0) {
      gpusEndedEarly.addAndGet(gpus);
      LOG.info("Themis: {} {}; its {} lease(s) end now ({} live GPU(s) back)", app, why,
          removed, gpus);
      gpusFreed();
    }
  }

  /**
   * An attempt of the app ended (its AM exited, failed or stopped heart-beating and expired):
   * its AM's registration with the agents' endpoint ends, as if it had left (the next
   * attempt's AM registers again with its own AMRMToken).
   */
  void attemptEnded(ApplicationAttemptId attempt) {
    String appId = attempt.getApplicationId().toString();
    engine.appEnded(appId);
    if (agentApps.contains(attempt.getApplicationId())) {
      agentLeft(appId);
    }
  }

  @Override
  public String verifyAmToken(String appId, String token) {
    org.apache.hadoop.yarn.server.resourcemanager.RMContext ctx = scheduler.getRMContext();
    String why = AmTokens.check(appId, token, ctx.getAMRMTokenSecretManager(), id -> {
      org.apache.hadoop.yarn.server.resourcemanager.rmapp.RMApp app = ctx.getRMApps().get(id);
      if (app == null || app.isAppInCompletedStates()) {
        return null;
      }
      org.apache.hadoop.yarn.server.resourcemanager.rmapp.attempt.RMAppAttempt a =
          app.getCurrentAppAttempt();
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
    Set<NodeId> nodes = new java.util.HashSet<>();
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
    gpusEndedEarly.addAndGet(ended);
    LOG.info("Themis: {} left the agents' endpoint; {} unused leased GPU(s) back", app, ended);
    if (ended > 0) {
      gpusFreed();
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
    gpusEndedEarly.addAndGet(released);
    LOG.info("Themis: {} gave back {} leased GPU(s) ({} asked: {})", app, released,
        perNode.values().stream().mapToInt(Integer::intValue).sum(), perNode);
    if (released > 0) {
      gpusFreed();
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

  // ---------------------------------------------------------------- lease enforcement

  private void enforceLeasesSafely() {
    try {
      enforceLeases();
    } catch (RuntimeException e) {
      // An exception would cancel the scheduled task: log it and keep enforcing.
      LOG.error("Themis lease enforcement pass failed; next pass in {} ms",
          settings.monitorIntervalMs(), e);
    }
  }

  /**
   * Expiry: preempt at expiry, kill after the grace period, drop leases of finished apps.
   * Runs on the built-in enforcer thread and, when configured, from LeaseExpiryPolicy; passes
   * are serialised (each lease changes state exactly once either way).
   */
  public void enforceLeases() {
    synchronized (enforceLock) {
      if (!scheduler.recovery().settle()) {
        return; // after an RM restart nothing ends before the NMs reported their containers
      }
      enforceLeasesLocked();
      enforcementPasses.incrementAndGet();
    }
  }

  private void enforceLeasesLocked() {
    agentApps.removeIf(a -> !scheduler.getSchedulerApplications().containsKey(a));
    boolean changed = false;
    for (Lease l : leases.snapshot()) {
      if (!scheduler.getSchedulerApplications().containsKey(l.app())) {
        leases.remove(l.id());
        changed = true;
      }
    }
    renewStockLeases();
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
      metrics.gpusFreed(leases.now());
      signal();
    }
  }

  /**
   * Stock-app policy {@code hold}: a lease of an app without a Themis agent whose GPU containers
   * still run on its node is renewed shortly before it expires (within two enforcement
   * intervals, so that it never lapses), for the GPUs those containers use there and for one
   * more lease length, but never past {@code stock-app.max-hold-ms} after it was granted: then
   * it expires and is enforced like any lease. GPUs it no longer uses go back at renewal.
   */
  private void renewStockLeases() {
    if (settings.stockAppPolicy() != ThemisSettings.StockAppPolicy.HOLD) {
      return;
    }
    long now = leases.now();
    long ahead = 2 * settings.monitorIntervalMs();
    for (Lease l : leases.snapshot()) {
      if (l.state() != Lease.State.ACTIVE || l.expiryMs() - now > ahead
          || agentApps.contains(l.app())) {
        continue;
      }
      long holdEnd = l.grantedAtMs() + settings.stockAppMaxHoldMs();
      if (l.expiryMs() >= holdEnd) {
        if (holdOver.add(l.id())) {
          LOG.info("Themis lease {} of {} on {} reached {} ({} ms since {}): it ends at {} and "
              + "is enforced like any lease", l.id(), l.app(), l.node(),
              ThemisSettings.STOCK_APP_MAX_HOLD_MS, settings.stockAppMaxHoldMs(),
              WaitDiagnostics.time(l.grantedAtMs()), WaitDiagnostics.time(l.expiryMs()));
        }
        continue;
      }
      // GPUs its containers use on the node beyond its other live leases there
      long others = leases.liveGpus(l.app(), l.node()) - (l.isLive(now) ? l.gpus() : 0);
      long need = scheduler.usedGpus(l.app(), l.node()) - others;
      if (need <= 0) {
        continue; // nothing of it in use: it expires (no container to preempt)
      }
      int keep = (int) Math.min(l.gpus(), need);
      long until = Math.min(l.expiryMs() + settings.leaseDurationMs(), holdEnd);
      Lease r = leases.renew(l.id(), keep, until);
      if (r == null) {
        continue;
      }
      renewals.incrementAndGet();
      LOG.info("Themis lease {} of {} on {} renewed: {} GPU(s) in use until {} ({}=hold, at "
          + "most until {})", l.id(), l.app(), l.node(), keep, WaitDiagnostics.time(until),
          ThemisSettings.STOCK_APP_POLICY, WaitDiagnostics.time(holdEnd));
      if (keep < l.gpus()) {
        gpusEndedEarly.addAndGet(l.gpus() - keep);
        gpusFreed();
      }
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
      for (Lease l : live == null ? java.util.Collections.<Lease>emptyList() : live) {
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
  List<AppGpus> appGpus() {
    List<AppGpus> out = new ArrayList<>();
    for (Map.Entry<ApplicationId, SchedulerApplication<FiCaSchedulerApp>> e
        : scheduler.getSchedulerApplications().entrySet()) {
      FiCaSchedulerApp attempt = e.getValue().getCurrentAppAttempt();
      if (attempt == null || attempt.isStopped()) {
        continue;
      }
      TreeMap<Long, Long> asks = new TreeMap<>();
      AppSchedulingInfo info = attempt.getAppSchedulingInfo();
      for (SchedulerRequestKey key : info.getSchedulerKeys()) {
        PendingAsk pa = info.getPendingAsk(key);
        long k = Gpus.of(pa.getPerAllocationResource());
        if (k > 0 && pa.getCount() > 0) {
          asks.merge(k, (long) pa.getCount(), Long::sum);
        }
      }
      Map<NodeId, Long> running = new TreeMap<>();
      for (RMContainer c : attempt.getLiveContainersMap().values()) {
        long g = Gpus.of(c.getAllocatedResource());
        if (g > 0 && c.getAllocatedNode() != null) {
          running.merge(c.getAllocatedNode(), g, Long::sum);
        }
      }
      out.add(new AppGpus(e.getKey(), agentApps.contains(e.getKey()), asks, running));
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
    Map<String, org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CSQueue> queues =
        new TreeMap<>();
    for (AppGpus a : appGpus()) {
      ObjectNode o = apps.addObject();
      o.put("app_id", a.app().toString());
      String queue = QueueGpus.queueOf(scheduler, a.app(), queues);
      if (queue != null) {
        o.put("queue", queue); // the engine shares GPUs between leaf queues (docs/yarn.md)
      }
      long pending = a.askedGpus();
      pendingTotal += pending;
      o.put("pending_gpus", pending);
      // container shape: the leftover step deals whole containers on one node
      putGpuUse(o, a);
    }
    QueueGpus.put(root, queues, clusterGpus());
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
        long periodicAt = System.currentTimeMillis() + settings.roundIntervalMs();
        while (running && !signalled) {
          long at = freedRoundAtMs == 0 ? periodicAt : Math.min(periodicAt, freedRoundAtMs);
          long wait = at - System.currentTimeMillis();
          if (wait <= 0) {
            break;
          }
          wake.await(wait, TimeUnit.MILLISECONDS);
        }
        signalled = false;
        freedRoundAtMs = 0;
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
        engine.supervise(); // a dead engine comes back before a round needs it
        runOneRound();
      } catch (RuntimeException e) {
        LOG.error("Themis round failed; leases unchanged", e);
      }
    }
  }

  /** Runs one round if there is something to decide. Returns the number of grants applied. */
  public int runOneRound() {
    if (!scheduler.recovery().settled()) {
      return 0; // after an RM restart: no grant before the NMs reported their containers
    }
    long id = rounds.get() + 1;
    long started = System.nanoTime();
    ObjectNode view = clusterView(id);
    int applied = 0;
    if (view == null) {
      metrics.nothingToDecide();
    } else {
      Optional<String> reply = engine.runRound(view.toString());
      if (reply.isPresent()) {
        rounds.incrementAndGet();
        applied = applyGrants(reply.get());
        metrics.roundDone(leases.now(), (System.nanoTime() - started) / 1e6, applied);
        if (applied > 0) {
          LOG.info("Themis round {} applied {} lease grant(s)", id, applied);
        }
      }
    }
    updateDiagnostics();
    return applied;
  }

  /** Refreshes every app's wait diagnostics (a failure here never stops the rounds). */
  private void updateDiagnostics() {
    try {
      waits.update(scheduler.getRMContext(), appGpus(), leases.now(), grantableGpus(),
          clusterGpus(), leases.snapshot());
    } catch (RuntimeException e) {
      LOG.warn("Themis could not update the apps' wait diagnostics", e);
    }
  }

  long clusterGpus() {
    long total = 0;
    for (FiCaSchedulerNode n : scheduler.getNodeTracker().getAllNodes()) {
      total += Gpus.of(n.getTotalResource());
    }
    return total;
  }

  // ---------------------------------------------------------------- status (JMX, read-only)

  @Override
  public String getStatusJson() {
    long now = leases.now();
    ObjectNode root = JSON.createObjectNode();
    root.put("now_ms", now);
    root.put("lease_duration_ms", settings.leaseDurationMs());
    root.put("grace_period_ms", settings.gracePeriodMs());
    root.put("stock_app_policy", settings.stockAppPolicy().name().toLowerCase());
    root.put("stock_app_max_hold_ms", settings.stockAppMaxHoldMs());
    root.put("rounds", rounds.get());
    // where AMs' agents reach this RM's agents' endpoint ("" while the engine is not up)
    root.put("agent_address", engine.agentAddress());
    Map<NodeId, Long> free = grantableGpus();
    ArrayNode nodes = root.putArray("nodes");
    for (FiCaSchedulerNode n : scheduler.getNodeTracker().getAllNodes()) {
      ObjectNode o = nodes.addObject();
      o.put("node_id", n.getNodeID().toString());
      o.put("total_gpus", Gpus.of(n.getTotalResource()));
      o.put("grantable_gpus", free.getOrDefault(n.getNodeID(), 0L));
    }
    List<Lease> all = leases.snapshot();
    Set<ApplicationId> leased = new java.util.HashSet<>();
    ArrayNode ls = root.putArray("leases");
    for (Lease l : all) {
      leased.add(l.app());
      ObjectNode o = ls.addObject();
      o.put("lease_id", l.id());
      o.put("app_id", l.app().toString());
      o.put("node_id", l.node().toString());
      o.put("gpus", l.gpus());
      o.put("granted_ms", l.grantedAtMs());
      o.put("expiry_ms", l.expiryMs());
      o.put("state", l.state().name());
      if (l.state() == Lease.State.EXPIRING) {
        o.put("grace_deadline_ms", l.graceDeadlineMs());
      }
    }
    ArrayNode apps = root.putArray("apps");
    Map<ApplicationId, WaitDiagnostics.Reason> shown = waits.shown();
    for (AppGpus a : appGpus()) {
      if (a.asks().isEmpty() && a.running().isEmpty() && !leased.contains(a.app())) {
        continue; // holds and asks no GPU
      }
      ObjectNode o = apps.addObject();
      o.put("app_id", a.app().toString());
      o.put("agent", a.agent());
      o.put("asked_gpus", a.askedGpus());
      putGpuUse(o, a);
      WaitDiagnostics.Reason r = shown.get(a.app());
      o.put("reason", r == null ? "" : r.kind());
      o.put("diagnostics", r == null ? "" : r.text());
    }
    return root.toString();
  }

  @Override
  public long getRounds() {
    return rounds.get();
  }

  @Override
  public long getLeaseRenewals() {
    return renewals.get();
  }

  @Override
  public String getStockAppPolicy() {
    return settings.stockAppPolicy().name().toLowerCase();
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
    metrics.engineInfo(reply.path("info"));
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

  /** An app's GPUs in use per node ("running_gpus") and its pending asks by container
   *  shape ("asks"), as both the engine's view and the status bean report them. */
  private static void putGpuUse(ObjectNode o, AppGpus a) {
    ObjectNode running = o.putObject("running_gpus");
    for (Map.Entry<NodeId, Long> r : a.running().entrySet()) {
      running.put(r.getKey().toString(), r.getValue());
    }
    ArrayNode asks = o.putArray("asks");
    for (Map.Entry<Long, Long> k : a.asks().entrySet()) {
      ObjectNode ask = asks.addObject();
      ask.put("gpus_per_container", k.getKey());
      ask.put("containers", k.getValue());
    }
  }
}
