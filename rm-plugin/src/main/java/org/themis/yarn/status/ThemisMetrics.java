package org.themis.yarn.status;

import static org.apache.hadoop.metrics2.lib.Interns.info;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.metrics2.MetricsCollector;
import org.apache.hadoop.metrics2.MetricsException;
import org.apache.hadoop.metrics2.MetricsInfo;
import org.apache.hadoop.metrics2.MetricsRecordBuilder;
import org.apache.hadoop.metrics2.MetricsSource;
import org.apache.hadoop.metrics2.lib.DefaultMetricsSystem;
import org.apache.hadoop.metrics2.lib.MetricsRegistry;
import org.apache.hadoop.metrics2.lib.MutableCounterLong;
import org.apache.hadoop.metrics2.lib.MutableQuantiles;
import org.apache.hadoop.metrics2.lib.MutableRate;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.themis.yarn.Gpus;
import org.themis.yarn.ThemisRuntime;
import org.themis.yarn.ThemisSettings;
import org.themis.yarn.lease.Lease;
import org.themis.yarn.lease.LeaseTable;
import org.themis.yarn.round.AppGpus;
import org.themis.yarn.round.NodePartitions;

/**
 * The plugin's metrics2 source ({@code Hadoop:service=ResourceManager,name=ThemisMetrics} in
 * the RM's {@code /jmx}, context {@code yarn} for any metrics2 sink); docs/yarn.md lists every
 * metric. Counters the runtime already keeps and the gauges (leases, GPUs) are read when a
 * snapshot is taken; latencies, refused bids and rho come from the rounds. Per-app rho has
 * bounded cardinality: one extra record per app among the {@code metrics.top-apps} apps with
 * the highest (worst) rho of the last round, tagged with its rank and application id. On a
 * cluster with node labels, one record per partition (docs/yarn.md, "Partitions") comes
 * between the two, tagged with the partition's name ({@value #DEFAULT_PARTITION_TAG} for the
 * default partition, as {@code themis status --all} prints it).
 */
public final class ThemisMetrics implements MetricsSource {
  private static final Logger LOG = LoggerFactory.getLogger(ThemisMetrics.class);
  static final String NAME = "ThemisMetrics";
  static final String CONTEXT = "yarn";
  /** Causes of refused bids, as the engine's round reply names them (else "other"). */
  public static final List<String> REJECT_CAUSES =
      Collections.unmodifiableList(
          Arrays.asList("invalid", "too_large", "not_open", "unauthenticated", "other"));
  /** The agents' lease warning: min(60 s, lease / 2), as in themis.arbiter.state. */
  static final long WARNING_MS = 60_000;

  private static final MetricsInfo APP_RHO = info("ThemisAppRho",
      "rho of one of the apps with the highest rho in the last round");
  private static final MetricsInfo RANK = info("Rank", "1 = highest rho");
  private static final MetricsInfo APP = info("App", "YARN application id");
  private static final MetricsInfo RHO = info("Rho",
      "finish-time fairness rho of the app (paper section 3.1); 1.7976931348623157E308 = infinite");
  /** The tag value of the default partition (no node label), never a valid label name. */
  public static final String DEFAULT_PARTITION_TAG = "<default>";
  private static final MetricsInfo PARTITION_RECORD = info("ThemisPartition",
      "GPUs, leases and apps asking for GPUs of one YARN partition (node label)");
  private static final MetricsInfo PARTITION = info("Partition",
      "node label; " + DEFAULT_PARTITION_TAG + " for the default partition");
  // the gauges of the cluster's record, and of each partition's for its nodes, leases, apps
  private static final MetricsInfo GPUS_TOTAL = info("GpusTotal", "GPUs of the nodes");
  private static final MetricsInfo GPUS_LEASED = info("GpusLeased", "GPUs under leases in force");
  private static final MetricsInfo GPUS_FREE = info("GpusFree",
      "GPUs no lease and no running container holds");
  private static final MetricsInfo LEASES_ACTIVE = info("LeasesActive", "leases in force");
  private static final MetricsInfo APPS_WAITING = info("AppsWaiting",
      "running apps with pending GPU asks");

  private final ThemisRuntime runtime;
  private final LeaseTable leases;
  private final ThemisSettings settings;
  private final MetricsRegistry registry = new MetricsRegistry(info(NAME,
      "Themis GPU scheduler: rounds, latencies, engine, leases, GPUs, bids, rho")).setContext(CONTEXT);
  private final MutableRate roundTime = registry.newRate("RoundTime",
      "round in the RM, cluster view built to grants committed (ms)", false);
  private final MutableRate engineTime = registry.newRate("EngineTime",
      "auction in the engine, view parsed to grants chosen (ms, engine's elapsed_ms)", false);
  private final MutableRate freedToGrant = registry.newRate("FreedToGrantTime",
      "GPUs freed (lease expiry or early end) while apps wait, to the next grants committed (ms)",
      false);
  private final MutableQuantiles freedToGrantQuantiles = registry.newQuantiles(
      "FreedToGrantTime60s", "FreedToGrantTime percentiles over 60 s windows", "Ops",
      "LatencyMs", 60);
  private final Map<String, MutableCounterLong> rejected = new LinkedHashMap<>();
  /** rho of each app in the last round that ran an auction (NaN: reported as infinite). */
  private volatile Map<String, Double> rho = Collections.emptyMap();
  private final Map<String, Boolean> gone = new ConcurrentHashMap<>();
  /** When GPUs were first freed since the last grant (0: none pending). */
  private long freedAtMs;
  private volatile boolean registered;

  public ThemisMetrics(ThemisRuntime runtime) {
    this.runtime = runtime;
    this.leases = runtime.leases();
    this.settings = runtime.settings();
    for (String cause : REJECT_CAUSES) {
      rejected.put(cause, registry.newCounter("BidsRejected" + camel(cause),
          "bids the engine refused: " + cause.replace('_', ' '), 0L));
    }
  }

  private static String camel(String snake) {
    StringBuilder sb = new StringBuilder();
    for (String part : snake.split("_")) {
      sb.append(Character.toUpperCase(part.charAt(0))).append(part.substring(1));
    }
    return sb.toString();
  }

  /** Registers with the RM's metrics system (a second RM in one JVM logs and goes without). */
  public void register() {
    try {
      DefaultMetricsSystem.instance().register(NAME, registry.info().description(), this);
      registered = true;
    } catch (MetricsException e) {
      LOG.warn("Themis metrics source {} not registered: {}", NAME, e.getMessage());
    }
  }

  public void unregister() {
    if (registered) {
      registered = false;
      DefaultMetricsSystem.instance().unregisterSource(NAME);
    }
    freedToGrantQuantiles.stop();
  }

  // ---------------------------------------------------------------- events from the runtime

  /** GPUs were freed (lease expired, ended early); the clock to the next grant starts. */
  public synchronized void gpusFreed(long nowMs) {
    if (freedAtMs == 0) {
      freedAtMs = nowMs;
    }
  }

  /** A round found nothing to decide (no free GPU or no app waiting): no one waits. */
  public synchronized void nothingToDecide() {
    freedAtMs = 0;
  }

  /** A round ran: its time in the RM (ms) and how many grants were committed. */
  public synchronized void roundDone(long nowMs, double elapsedMs, int applied) {
    roundTime.add(Math.round(elapsedMs));
    if (applied > 0 && freedAtMs > 0) {
      freedToGrant.add(nowMs - freedAtMs);
      freedToGrantQuantiles.add(nowMs - freedAtMs);
      freedAtMs = 0;
    }
  }

  /** The {@code info} object of the engine's round reply (themis.yarn.rounds). */
  public void engineInfo(JsonNode info) {
    if (info.has("elapsed_ms")) {
      engineTime.add(Math.round(info.path("elapsed_ms").asDouble()));
    }
    Iterator<Map.Entry<String, JsonNode>> it = info.path("bids_rejected").fields();
    while (it.hasNext()) {
      Map.Entry<String, JsonNode> e = it.next();
      MutableCounterLong c = rejected.getOrDefault(e.getKey(), rejected.get("other"));
      c.incr(Math.max(0, e.getValue().asLong(0)));
    }
    JsonNode r = info.path("rho");
    if (r.isObject()) {
      Map<String, Double> m = new java.util.HashMap<>();
      Iterator<Map.Entry<String, JsonNode>> rs = r.fields();
      while (rs.hasNext()) {
        Map.Entry<String, JsonNode> e = rs.next();
        m.put(e.getKey(), e.getValue().isNumber() ? e.getValue().asDouble() : Double.NaN);
      }
      rho = m;
      gone.clear();
    }
  }

  /** The app finished: its rho is no longer shown. */
  public void appRemoved(ApplicationId app) {
    gone.put(app.toString(), Boolean.TRUE);
  }

  // ---------------------------------------------------------------- snapshot

  @Override
  public void getMetrics(MetricsCollector collector, boolean all) {
    MetricsRecordBuilder rb = collector.addRecord(registry.info()).setContext(CONTEXT);
    rb.addCounter(info("Rounds", "rounds run (an engine reply received)"),
            runtime.driver().rounds())
        .addCounter(info("GrantsApplied", "lease grants committed"),
            runtime.driver().grantsApplied())
        .addCounter(info("GrantsRefused", "engine grants refused by the RM's validation"),
            runtime.driver().grantsRefused())
        .addCounter(info("PreemptMarks", "containers marked for preemption at lease expiry"),
            runtime.enforcer().preemptMarks())
        .addCounter(info("KillMarks", "containers killed after the grace period"),
            runtime.enforcer().killMarks())
        .addCounter(info("LeaseRenewals", "leases renewed under stock-app policy hold"),
            runtime.enforcer().renewals())
        .addCounter(info("RenewedInPlace", "leases a round won back for their holder"),
            runtime.driver().renewedInPlace())
        .addCounter(info("GpusEndedEarly", "leased GPUs given back before expiry"),
            runtime.gpusEndedEarly())
        .addCounter(info("EngineStarts", "engine processes started"), runtime.engine().starts())
        .addCounter(info("EngineRestarts", "engine processes started after the first"),
            Math.max(0, runtime.engine().starts() - 1))
        .addCounter(info("EngineFailures", "engine deaths, hangs, timeouts, failed rounds"),
            runtime.engine().failures());
    long now = leases.now();
    long warn = Math.min(WARNING_MS, settings.leaseDurationMs() / 2);
    NodePartitions parts = runtime.cluster().nodePartitions();
    Map<String, PartitionFigures> byPartition = new TreeMap<>(); // "" (default) first
    byPartition.put("", new PartitionFigures());
    for (String label : runtime.cluster().labelNames()) {
      byPartition.put(label, new PartitionFigures());
    }
    PartitionFigures cluster = new PartitionFigures();
    int expiring = 0;
    int inGrace = 0;
    for (Lease l : leases.snapshot()) {
      if (l.state() == Lease.State.EXPIRING) {
        inGrace++;
      } else if (l.isLive(now)) {
        figures(byPartition, l.partition()).leased(l, cluster);
        if (l.expiryMs() - now <= warn) {
          expiring++;
        }
      }
    }
    Map<NodeId, Long> grantable = runtime.cluster().grantableGpus();
    for (FiCaSchedulerNode n : runtime.scheduler().getNodeTracker().getAllNodes()) {
      figures(byPartition, parts.of(n.getNodeID())).node(Gpus.of(n.getTotalResource()),
          grantable.getOrDefault(n.getNodeID(), 0L), cluster);
    }
    for (AppGpus a : runtime.cluster().appGpus()) {
      if (a.askedGpus() > 0) {
        figures(byPartition, a.partition()).waiting(cluster);
      }
    }
    rb.addGauge(LEASES_ACTIVE, cluster.leases)
        .addGauge(info("LeasesExpiringSoon",
            "leases in force that expire within the lease warning, min(60 s, lease / 2)"), expiring)
        .addGauge(info("LeasesInGrace", "expired leases whose containers are being preempted"),
            inGrace)
        .addGauge(GPUS_TOTAL, cluster.total)
        .addGauge(GPUS_LEASED, cluster.leased)
        .addGauge(GPUS_FREE, cluster.free)
        .addGauge(APPS_WAITING, cluster.waiting)
        .addGauge(info("AppsWithRho", "apps in the last round's auction (rho known)"),
            rho.size());
    registry.snapshot(rb, all);
    if (byPartition.size() > 1 || parts.labeled()) {
      for (Map.Entry<String, PartitionFigures> e : byPartition.entrySet()) {
        PartitionFigures f = e.getValue();
        collector.addRecord(PARTITION_RECORD).setContext(CONTEXT)
            .tag(PARTITION, partitionTag(e.getKey()))
            .addGauge(GPUS_TOTAL, f.total)
            .addGauge(GPUS_LEASED, f.leased)
            .addGauge(GPUS_FREE, f.free)
            .addGauge(LEASES_ACTIVE, f.leases)
            .addGauge(APPS_WAITING, f.waiting);
      }
    }
    int rank = 0;
    for (Map.Entry<String, Double> e : topRho()) {
      rank++;
      double v = Double.isNaN(e.getValue()) || Double.isInfinite(e.getValue())
          ? Double.MAX_VALUE : e.getValue();
      collector.addRecord(APP_RHO).setContext(CONTEXT)
          .tag(RANK, Integer.toString(rank))
          .tag(APP, e.getKey())
          .addGauge(RHO, v);
    }
  }

  /** A partition's name as its records' tag: the label, {@value #DEFAULT_PARTITION_TAG} for "". */
  public static String partitionTag(String partition) {
    return partition.isEmpty() ? DEFAULT_PARTITION_TAG : partition;
  }

  private static PartitionFigures figures(Map<String, PartitionFigures> m, String partition) {
    // a partition not (or no longer) among the cluster's labels still gets its record
    return m.computeIfAbsent(partition, p -> new PartitionFigures());
  }

  /** The gauges of one partition (or of the cluster): sums over its nodes, leases, apps. */
  private static final class PartitionFigures {
    long total;
    long free;
    long leased;
    int leases;
    int waiting;

    void node(long gpus, long grantable, PartitionFigures cluster) {
      total += gpus;
      free += grantable;
      cluster.total += gpus;
      cluster.free += grantable;
    }

    void leased(Lease l, PartitionFigures cluster) {
      leased += l.gpus();
      leases++;
      cluster.leased += l.gpus();
      cluster.leases++;
    }

    void waiting(PartitionFigures cluster) {
      waiting++;
      cluster.waiting++;
    }
  }

  /** The {@code metrics.top-apps} apps with the highest rho (infinite first), still running. */
  List<Map.Entry<String, Double>> topRho() {
    List<Map.Entry<String, Double>> out = new ArrayList<>();
    for (Map.Entry<String, Double> e : rho.entrySet()) {
      if (!gone.containsKey(e.getKey())) {
        out.add(e);
      }
    }
    Comparator<Map.Entry<String, Double>> worst = Comparator.comparingDouble(
        e -> Double.isNaN(e.getValue()) ? Double.POSITIVE_INFINITY : e.getValue());
    out.sort(worst.reversed().thenComparing(Map.Entry::getKey));
    return out.subList(0, Math.min(settings.metricsTopApps(), out.size()));
  }

  /** For tests: is the source registered with the metrics system? */
  public boolean registered() {
    return registered;
  }
}
