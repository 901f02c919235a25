package org.themis.yarn;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Field;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BooleanSupplier;
import org.apache.hadoop.metrics2.lib.MutableRate;
import org.apache.hadoop.metrics2.util.SampleStat;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.ResourceRequest;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.resourcemanager.MockAM;
import org.apache.hadoop.yarn.server.resourcemanager.MockNM;
import org.apache.hadoop.yarn.server.resourcemanager.MockRM;
import org.apache.hadoop.yarn.server.resourcemanager.MockRMAppSubmissionData;
import org.apache.hadoop.yarn.server.resourcemanager.MockRMAppSubmitter;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.RMApp;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.attempt.RMAppAttempt;
import org.apache.hadoop.yarn.util.resource.ResourceUtils;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.themis.yarn.engine.EngineSupervisor;
import org.themis.yarn.lease.Lease;
import org.themis.yarn.status.ThemisMetrics;

/**
 * Scale benchmark (bench/bench_scale.py; docs/yarn.md, "Scale"). A real ResourceManager
 * (YARN's MockRM: every RM service in process, RPC calls made as direct calls) with MockNMs
 * heartbeating every {@code bench.heartbeat-ms} and unmanaged AMs (MockAM) asking through the
 * real ApplicationMasterService, run twice in one JVM: the stock CapacityScheduler, then
 * ThemisCapacityScheduler with its Python engine, each GPU app's agent speaking gRPC to the
 * engine from bench/scale_agents.py. Both phases get the same nodes, apps and asks; both
 * count commits the same way ({@link BenchSchedulers}). Writes one JSON document to
 * {@code bench.out}. Not in the JUnit suite (profile scale-bench only).
 */
class ScaleBench {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final int nms = Integer.getInteger("bench.nms", 8);
  private final int gpus = Integer.getInteger("bench.gpus", 32);
  private final int apps = Integer.getInteger("bench.apps", 20);
  private final double gpuShare = Double.parseDouble(System.getProperty("bench.gpu-share", "0.5"));
  private final int nonGpuPerApp = Integer.getInteger("bench.nongpu-per-app", 50);
  private final int demand = Integer.getInteger("bench.demand", 4);
  // agent processes: the GPU apps' ids split over them (bench/scale_agents.py --procs)
  private final int agentProcs = Integer.getInteger("bench.agent-procs", 1);
  private final long leaseMs = Long.getLong("bench.lease-ms", 8_000L);
  private final long turnoverMs = Long.getLong("bench.turnover-ms", 20_000L);
  // renewal in place (docs/yarn.md): unset = the product's default (20 s, at most lease / 4)
  private final Long renewAheadMs = Long.getLong("bench.renew-ahead-ms");
  private final long heartbeatMs = Long.getLong("bench.heartbeat-ms", 1_000L);
  private final String python = System.getProperty("bench.python",
      ThemisMiniCluster.testPython());
  private final int batches = Integer.getInteger("bench.batches", 3);
  private final String logLevel = System.getProperty("bench.log-level", "WARN");
  private final Path out = Path.of(System.getProperty("bench.out", "target/bench-scale.json"));

  @Test
  @Timeout(value = 6, unit = java.util.concurrent.TimeUnit.HOURS) // not the suite's 5 minutes
  void scale() throws Exception {
    ObjectNode root = JSON.createObjectNode();
    ObjectNode setup = root.putObject("setup");
    setup.put("nms", nms);
    setup.put("gpus", gpus);
    setup.put("apps", apps);
    setup.put("gpu_apps", gpuApps());
    setup.put("nongpu_containers", (long) nonGpuPerApp * (apps - gpuApps()));
    setup.put("demand", demand);
    setup.put("agent_procs", agentProcs);
    setup.put("lease_ms", leaseMs);
    setup.put("turnover_ms", turnoverMs);
    setup.put("renew_ahead_ms", renewAheadMs == null ? "default" : renewAheadMs.toString());
    setup.put("heartbeat_ms", heartbeatMs);
    long base = usedHeapMb();
    root.put("baseline_heap_mb", base);
    // stock first by default; "themis,stock" checks that the order (JIT warm-up, heap) does not
    // decide the ratio
    String order = System.getProperty("bench.order", "stock,themis");
    root.put("order", order);
    for (String p : order.split(",")) {
      if (!p.equals("stock") && !p.equals("themis")) {
        throw new IllegalArgumentException("bench.order: " + order + " (stock,themis or "
            + "themis,stock)");
      }
      root.set(p, phase(p.equals("themis"), base));
    }
    Files.createDirectories(out.toAbsolutePath().getParent());
    Files.writeString(out, JSON.writerWithDefaultPrettyPrinter().writeValueAsString(root));
    progress("wrote " + out.toAbsolutePath());
  }

  private int gpuApps() {
    return (int) Math.round(apps * gpuShare);
  }

  private static void progress(String msg) {
    System.err.printf("[scale-bench %tT] %s%n", System.currentTimeMillis(), msg);
    System.err.flush();
  }

  private YarnConfiguration conf(boolean themis) {
    YarnConfiguration conf = new YarnConfiguration();
    conf.set(YarnConfiguration.RM_SCHEDULER, (themis ? BenchSchedulers.Themis.class
        : BenchSchedulers.Stock.class).getName());
    conf.set("yarn.resource-types", Gpus.GPU);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
    conf.setLong(YarnConfiguration.RM_NM_HEARTBEAT_INTERVAL_MS, heartbeatMs);
    conf.setBoolean("yarn.scheduler.capacity.schedule-asynchronously.enable", true);
    conf.setBoolean(YarnConfiguration.RECOVERY_ENABLED, false);
    conf.set(ThemisSettings.PYTHON_EXECUTABLE, python);
    conf.setInt(ThemisSettings.AGENT_PORT, 0);
    // the agents run on this host and scale_agents.py speaks plaintext to 127.0.0.1 only (as
    // ThemisMiniCluster): the endpoint's defaults (TLS on, bound to the RM's host) set aside
    conf.setBoolean(ThemisSettings.AGENT_TLS_ENABLED, false);
    conf.set(ThemisSettings.AGENT_BIND_HOST, "127.0.0.1");
    conf.setLong(ThemisSettings.LEASE_DURATION_MS, leaseMs);
    conf.setLong(ThemisSettings.GRACE_PERIOD_MS, 0);
    if (renewAheadMs != null) {
      conf.setLong(ThemisSettings.RENEW_AHEAD_MS, renewAheadMs);
    }
    conf.setLong(ThemisSettings.MONITOR_INTERVAL_MS, 100);
    conf.setLong(ThemisSettings.ROUND_TIMEOUT_MS, 60_000);
    conf.setLong(ThemisSettings.ENGINE_START_TIMEOUT_MS, 120_000);
    return conf;
  }

  private ObjectNode phase(boolean themis, long baseHeapMb) throws Exception {
    String name = themis ? "themis" : "stock";
    ObjectNode o = JSON.createObjectNode();
    BenchSchedulers.current = new BenchSchedulers.Counts();
    YarnConfiguration conf = conf(themis);
    ResourceUtils.resetResourceTypes(conf);
    MockRM rm = new MockRM(conf);
    // MockRM turns the root logger to DEBUG; an RM in production logs at INFO or less
    org.apache.log4j.Level level = org.apache.log4j.Level.toLevel(logLevel);
    org.apache.log4j.LogManager.getRootLogger().setLevel(level);
    org.apache.log4j.Logger.getLogger("org.themis").setLevel(level);
    // the engine's own log lines (one per round, with where its time went) for the report
    org.apache.log4j.Logger.getLogger(EngineSupervisor.class).setLevel(org.apache.log4j.Level.INFO);
    rm.disableDrainEventsImplicitly();
    rm.start();
    Process agents = null;
    Thread heartbeats = null;
    AtomicBoolean stop = new AtomicBoolean();
    try {
      long t0 = System.currentTimeMillis();
      List<MockNM> nodes = new ArrayList<>();
      for (int i = 0; i < nms; i++) {
        Resource cap = Resource.newInstance(1L << 30, 100_000); // GPUs are the only limit
        cap.setResourceValue(Gpus.GPU, gpus / nms + (i < gpus % nms ? 1 : 0));
        // one host per NM, as IP literals: the RM resolves a node's host for every container
        // token it hands out, and made-up names would wait for DNS to say no each time
        MockNM nm = new MockNM(String.format("127.1.%d.%d:1234", i / 250, 1 + i % 250), cap,
            rm.getResourceTrackerService());
        nm.registerNode();
        nodes.add(nm);
      }
      progress(name + ": " + nms + " NMs registered");
      List<MockAM> ams = new ArrayList<>();
      for (int i = 0; i < apps; i++) {
        RMApp app = MockRMAppSubmitter.submit(rm, MockRMAppSubmissionData.Builder
            .createWithMemory(128, rm).withAppName("bench-" + i).withQueue("default")
            .withUnmanagedAM(true).build());
        MockAM am = MockRM.launchUAM(app, rm, nodes.get(0));
        am.registerAppAttempt();
        ams.add(am);
        if ((i + 1) % 100 == 0) {
          progress(name + ": " + (i + 1) + " apps registered");
        }
      }
      o.put("setup_s", (System.currentTimeMillis() - t0) / 1000.0);
      heartbeats = new Thread(() -> heartbeatLoop(nodes, stop), "bench-nm-heartbeats");
      heartbeats.setDaemon(true);
      heartbeats.start();
      // Non-GPU apps first: in the FIFO ordering of a leaf queue, an app whose GPU ask finds
      // no headroom (every GPU in use) ends the queue's pass, so non-GPU apps behind it would
      // wait for a GPU to come free (stock CapacityScheduler's behaviour as much as Themis').
      List<MockAM> otherAms = ams.subList(0, apps - gpuApps());
      List<MockAM> gpuAms = ams.subList(apps - gpuApps(), ams.size());
      BenchSchedulers.Themis s = themis ? (BenchSchedulers.Themis) rm.getResourceScheduler()
          : null;
      if (themis) {
        String address = "";
        for (int i = 0; i < 1200 && address.isEmpty(); i++) {
          s.runtime().engine().health();
          address = s.runtime().engine().agentAddress();
          Thread.sleep(100);
        }
        Path ids = Files.createTempFile("bench-apps", ".txt");
        StringBuilder sb = new StringBuilder();
        for (MockAM am : gpuAms) {
          // each agent proves it is its app's AM with the attempt's AMRMToken, as a real AM
          // does (docs/yarn.md, "Security"): "<app id> <token>" per line
          ApplicationId id = am.getApplicationAttemptId().getApplicationId();
          RMAppAttempt attempt = rm.getRMContext().getRMApps().get(id).getAppAttempts()
              .get(am.getApplicationAttemptId());
          sb.append(id).append(' ').append(attempt.getAMRMToken().encodeToUrlString())
              .append('\n');
        }
        Files.writeString(ids, sb.toString());
        agents = new ProcessBuilder(python, Path.of(System.getenv().getOrDefault(
            "THEMIS_REPO_ROOT", "..")).resolve("bench/scale_agents.py").toString(),
            "--arbiter", address, "--apps-file", ids.toString(), "--demand",
            Integer.toString(demand), "--procs", Integer.toString(agentProcs))
            .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        BufferedReader r = new BufferedReader(new InputStreamReader(agents.getInputStream()));
        String line = r.readLine();
        if (line == null || !line.contains("\"registered\"")) {
          throw new IllegalStateException("agents did not register: " + line);
        }
        progress(name + ": " + line);
        o.put("agents_registered", line);
        Thread drain = new Thread(() -> {
          try {
            String l;
            while ((l = r.readLine()) != null) {
              progress("agents: " + l);
            }
          } catch (java.io.IOException ignored) {
            // the driver went away
          }
        });
        drain.setDaemon(true);
        drain.start();
        waitFor(gpuAms.size() + " agents known to the RM", 120_000, () ->
            gpuAms.stream().allMatch(a -> s.runtime().agents().hasAgent(
                a.getApplicationAttemptId().getApplicationId())));
      }
      // GPU apps: endless 1-GPU asks (as many containers as there are GPUs)
      long fillStart = System.currentTimeMillis();
      for (MockAM am : gpuAms) {
        Resource r = Resource.newInstance(1024, 1);
        r.setResourceValue(Gpus.GPU, 1);
        ResourceRequest rr = ResourceRequest.newInstance(Priority.newInstance(1),
            ResourceRequest.ANY, r, gpus);
        rr.setAllocationRequestId(1);
        am.allocate(List.of(rr), null);
      }
      BenchSchedulers.Counts c = BenchSchedulers.current;
      long fillTarget = (long) Math.ceil(0.9 * Math.min(gpus, (long) gpuApps() * gpus));
      boolean filled = waitQuiet(120_000, () -> c.gpuContainers.get() >= fillTarget);
      o.put("gpu_fill_90pct_s", filled ? (System.currentTimeMillis() - fillStart) / 1000.0 : -1);
      progress(name + ": GPU containers committed: " + c.gpuContainers.get() + " of " + gpus);
      // non-GPU allocation rate: every other app asks nonGpuPerApp 128 MB containers at once,
      // bench.batches times (each batch after the previous one is committed); median batch
      long batchSize = (long) nonGpuPerApp * otherAms.size();
      List<Double> rates = new ArrayList<>();
      for (int b = 0; b < batches && batchSize > 0; b++) {
        long target = c.nonGpu.get() + batchSize;
        long askStart = System.nanoTime();
        for (MockAM am : otherAms) {
          ResourceRequest rr = ResourceRequest.newInstance(Priority.newInstance(2),
              ResourceRequest.ANY, Resource.newInstance(128, 1), nonGpuPerApp);
          rr.setAllocationRequestId(2);
          am.allocate(List.of(rr), null);
        }
        boolean done = waitQuiet(600_000, () -> c.nonGpu.get() >= target);
        double secs = (System.nanoTime() - askStart) / 1e9;
        if (!done) {
          progress(name + ": batch " + b + " not committed within 600 s");
        }
        rates.add(done ? batchSize / secs : 0.0);
        progress(String.format("%s: batch %d: %d non-GPU containers in %.2f s (%.0f/s)", name, b,
            batchSize, secs, batchSize / secs));
      }
      o.put("nongpu_containers_per_batch", batchSize);
      o.set("nongpu_batch_per_s", JSON.valueToTree(rates));
      // the first batch of a phase also warms up the JIT for that scheduler's code: left out
      List<Double> sorted = new ArrayList<>(rates.size() >= 3 ? rates.subList(1, rates.size())
          : rates);
      Collections.sort(sorted);
      o.put("nongpu_per_s", sorted.isEmpty() ? 0 : sorted.get((sorted.size() - 1) / 2));
      if (themis) {
        turnover(s, c, o);
      }
      o.put("rm_heap_mb", usedHeapMb() - baseHeapMb);
      if (themis) {
        long pid = s.runtime().engine().pid();
        o.put("engine_pid", pid);
        o.put("engine_rss_mb", procStatusMb(pid, "VmRSS"));
        o.put("engine_peak_rss_mb", procStatusMb(pid, "VmHWM"));
        // the agents' driver and, with --procs > 1, its agent processes
        long agentsRss = -1;
        if (agents != null) {
          agentsRss = procStatusMb(agents.pid(), "VmRSS");
          for (ProcessHandle h : agents.descendants().toList()) {
            agentsRss += Math.max(0, procStatusMb(h.pid(), "VmRSS"));
          }
        }
        o.put("agents_rss_mb", agentsRss);
        o.put("rounds", s.runtime().driver().rounds());
        o.put("grants_applied", s.runtime().driver().grantsApplied());
        o.put("grants_refused", s.runtime().driver().grantsRefused());
        o.put("gpu_proposals_rejected", s.rejectedGpuProposals());
        o.put("gpu_asks_filtered", s.filteredGpuAsks());
        o.put("engine_starts", s.runtime().engine().starts());
      }
      o.put("gpu_containers_committed", c.gpuContainers.get());
      progress(name + ": " + o);
      return o;
    } finally {
      stop.set(true);
      if (heartbeats != null) {
        heartbeats.join(10_000);
      }
      if (agents != null) {
        agents.getOutputStream().close();
        // the driver kills its agent processes on SIGTERM; in case it cannot, they go too
        List<ProcessHandle> children = agents.descendants().toList();
        agents.destroy();
        if (!agents.waitFor(15, java.util.concurrent.TimeUnit.SECONDS)) {
          agents.destroyForcibly();
        }
        children.forEach(ProcessHandle::destroyForcibly);
      }
      rm.stop();
    }
  }

  /**
   * Lease turnover for {@code turnoverMs}: every lease that ends (its containers killed, no
   * grace) frees GPUs that the apps' endless asks want back. Per lease end on a node: time to the
   * next lease granted on it and to the next GPU container committed there under that lease.
   *
   * <p>With renewal in place (docs/yarn.md) a round runs {@code renew-ahead-ms} before a lease
   * ends: a lease whose holder wins its GPUs back keeps its id and gets a new expiry (counted as
   * renewed, not as an end: its containers run on), and the part not won back stays a lease of
   * its own with the old expiry (not a grant: it ends then). GPUs of an ending lease that the
   * round gave to another app are granted before the end: a grant on the node from the start of
   * that round on serves the end, at 0 ms when it came before it.
   */
  private void turnover(BenchSchedulers.Themis s, BenchSchedulers.Counts c, ObjectNode o)
      throws Exception {
    Map<Long, Lease> seen = new HashMap<>(); // lease id -> its latest state
    Set<Long> expired = new HashSet<>();
    List<long[]> pending = new ArrayList<>(); // {node index, expiry ms}
    List<NodeId> nodeIds = new ArrayList<>();
    Map<NodeId, Integer> nodeIndex = new HashMap<>();
    Map<NodeId, List<Long>> grantsOn = new HashMap<>();
    List<Long> toGrant = new ArrayList<>();
    List<Long> toCommit = new ArrayList<>();
    List<Long> renewedAhead = new ArrayList<>(); // old expiry - when the renewal was seen
    long grantedAhead = 0;
    long unserved = 0;
    long ahead = s.settings().renewAheadMs();
    resetRates(s);
    long start = System.currentTimeMillis();
    long end = start + turnoverMs;
    long roundsBefore = s.runtime().driver().rounds();
    for (Lease l : s.leases().snapshot()) {
      seen.put(l.id(), l); // granted before the window: their expiries count
    }
    // polls go on after the window (at most a lease, 10 s) so that its last ends get served
    long settle = end + Math.min(10_000, leaseMs);
    while (System.currentTimeMillis() < settle) {
      long now = System.currentTimeMillis();
      List<Lease> snap = s.leases().snapshot();
      Set<String> rests = new HashSet<>(); // app, node, old expiry of each lease renewed now
      for (Lease l : snap) {
        Lease old = seen.get(l.id());
        if (old != null && old.expiryMs() != l.expiryMs()) {
          if (old.expiryMs() >= start && old.expiryMs() < end) {
            renewedAhead.add(old.expiryMs() - now);
          }
          rests.add(restKey(l, old.expiryMs()));
        }
      }
      for (Lease l : snap) {
        Lease old = seen.put(l.id(), l);
        if (old == null && !rests.contains(restKey(l, l.expiryMs()))) {
          grantsOn.computeIfAbsent(l.node(), k -> new ArrayList<>()).add(l.grantedAtMs());
        }
      }
      for (Lease l : seen.values()) {
        if (l.expiryMs() <= now && l.expiryMs() >= start && l.expiryMs() < end
            && expired.add(l.id())) {
          NodeId n = l.node();
          nodeIndex.computeIfAbsent(n, k -> {
            nodeIds.add(k);
            return nodeIds.size() - 1;
          });
          pending.add(new long[] {nodeIndex.get(n), l.expiryMs()});
        }
      }
      Thread.sleep(20);
    }
    for (long[] p : pending) {
      NodeId n = nodeIds.get((int) p[0]);
      long exp = p[1];
      // the round that re-offered this lease's GPUs ran up to `ahead` ms before its end
      long grant = firstAtOrAfter(grantsOn.getOrDefault(n, Collections.emptyList()),
          exp - ahead);
      if (grant < 0) {
        unserved++;
        continue;
      }
      if (grant < exp) {
        grantedAhead++;
      }
      toGrant.add(Math.max(0L, grant - exp));
      ConcurrentLinkedQueue<Long> q = c.gpuCommits.get(n);
      long commit = firstAtOrAfter(q == null ? Collections.emptyList() : new ArrayList<>(q),
          Math.max(grant, exp));
      if (commit >= 0) {
        toCommit.add(commit - exp);
      }
    }
    ObjectNode t = o.putObject("lease_turnover");
    t.put("expiries", pending.size());
    t.put("unserved", unserved);
    t.put("renew_ahead_ms", ahead);
    t.put("renewed_in_place", renewedAhead.size());
    t.set("renewed_before_expiry_ms", stats(renewedAhead));
    t.put("granted_before_expiry", grantedAhead);
    t.put("rounds", s.runtime().driver().rounds() - roundsBefore);
    t.set("expiry_to_grant_ms", stats(toGrant));
    t.set("expiry_to_commit_ms", stats(toCommit));
    t.set("round_in_rm_ms", rate(s, "roundTime"));
    t.set("engine_round_ms", rate(s, "engineTime"));
    t.set("freed_to_grant_ms", rate(s, "freedToGrant"));
    t.put("freed_round_delay_ms", s.settings().freedRoundDelayMs());
    t.put("monitor_interval_ms", s.settings().monitorIntervalMs());
    progress("turnover: " + t);
  }

  /**
   * A lease renewed in place leaves the rest of its GPUs as a new lease with its app, node
   * and old end: this key finds it.
   */
  private static String restKey(Lease l, long expiryMs) {
    return l.app() + " " + l.node() + " " + expiryMs;
  }

  private static long firstAtOrAfter(List<Long> times, long t) {
    long best = -1;
    for (long x : times) {
      if (x >= t && (best < 0 || x < best)) {
        best = x;
      }
    }
    return best;
  }

  private static ObjectNode stats(List<Long> xs) {
    List<Long> s = new ArrayList<>(xs);
    Collections.sort(s);
    ObjectNode o = JSON.createObjectNode();
    o.put("n", s.size());
    if (!s.isEmpty()) {
      o.put("median", s.get((s.size() - 1) / 2));
      o.put("p95", s.get(Math.max(0, (int) Math.ceil(0.95 * s.size()) - 1)));
      o.put("max", s.get(s.size() - 1));
    }
    return o;
  }

  private static MutableRate rateField(BenchSchedulers.Themis s, String field) throws Exception {
    Field f = ThemisMetrics.class.getDeclaredField(field);
    f.setAccessible(true);
    return (MutableRate) f.get(s.runtime().metrics());
  }

  private static void resetRates(BenchSchedulers.Themis s) throws Exception {
    for (String f : new String[] {"roundTime", "engineTime", "freedToGrant"}) {
      rateField(s, f).resetMinMax();
      Field st = rateField(s, f).getClass().getSuperclass().getDeclaredField("intervalStat");
      st.setAccessible(true);
      ((SampleStat) st.get(rateField(s, f))).reset();
    }
  }

  private static ObjectNode rate(BenchSchedulers.Themis s, String field) throws Exception {
    MutableRate r = rateField(s, field);
    Field st = r.getClass().getSuperclass().getDeclaredField("intervalStat");
    st.setAccessible(true);
    SampleStat ss = (SampleStat) st.get(r);
    ObjectNode o = JSON.createObjectNode();
    o.put("n", ss.numSamples());
    o.put("mean", Math.round(ss.mean() * 10) / 10.0);
    o.put("max", ss.max());
    return o;
  }

  private void heartbeatLoop(List<MockNM> nodes, AtomicBoolean stop) {
    while (!stop.get()) {
      long start = System.currentTimeMillis();
      for (MockNM nm : nodes) {
        try {
          nm.nodeHeartbeat(true);
        } catch (Exception e) {
          progress("heartbeat of " + nm.getNodeId() + " failed: " + e);
        }
        if (stop.get()) {
          return;
        }
      }
      long left = heartbeatMs - (System.currentTimeMillis() - start);
      if (left > 0) {
        try {
          Thread.sleep(left);
        } catch (InterruptedException e) {
          return;
        }
      }
    }
  }

  private static long usedHeapMb() {
    for (int i = 0; i < 3; i++) {
      System.gc();
    }
    Runtime rt = Runtime.getRuntime();
    return (rt.totalMemory() - rt.freeMemory()) >> 20;
  }

  private static long procStatusMb(long pid, String key) {
    try {
      for (String l : Files.readAllLines(Path.of("/proc", Long.toString(pid), "status"))) {
        if (l.startsWith(key + ":")) {
          return Long.parseLong(l.replaceAll("[^0-9]", "")) / 1024;
        }
      }
    } catch (Exception e) {
      return -1;
    }
    return -1;
  }

  private static void waitFor(String what, long ms, BooleanSupplier ok) throws Exception {
    if (!waitQuiet(ms, ok)) {
      throw new IllegalStateException("timed out after " + ms + " ms waiting for " + what);
    }
  }

  private static boolean waitQuiet(long ms, BooleanSupplier ok) throws InterruptedException {
    long end = System.currentTimeMillis() + ms;
    while (System.currentTimeMillis() < end) {
      if (ok.getAsBoolean()) {
        return true;
      }
      Thread.sleep(5);
    }
    return ok.getAsBoolean();
  }
}
