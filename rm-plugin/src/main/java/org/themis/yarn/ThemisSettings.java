package org.themis.yarn;

import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;

/**
 * Every {@code yarn.resourcemanager.themis.*} setting, read and validated once at start-up.
 * A bad value throws {@link IllegalArgumentException} naming the key and the value, which makes
 * the ResourceManager refuse to start. The defaults and accepted names of the settings the
 * Python engine also reads (fairness knob, solver, ideal time, starvation, lease length, app
 * limit) come from {@link EngineDefaults}, generated from the engine's own definitions.
 */
public final class ThemisSettings {
  public static final String PREFIX = "yarn.resourcemanager.themis.";
  /** YarnConfiguration.RM_HA_ENABLED / RM_HA_ID (this RM's id among yarn.resourcemanager.ha.rm-ids). */
  static final String RM_HA_ENABLED = "yarn.resourcemanager.ha.enabled";
  static final String RM_HA_ID = "yarn.resourcemanager.ha.id";

  public static final String FAIRNESS_KNOB = PREFIX + "fairness-knob";
  public static final String LEASE_DURATION_MS = PREFIX + "lease-duration-ms";
  /**
   * The leases granted in one round last lease-duration-ms +- this / 2 (default: half of
   * lease-duration-ms, at most all of it), spread evenly over the round's apps by the engine
   * (themis.mechanism.round.lease_lengths), so that they do not all end together and one round
   * does not offer the whole cluster (docs/yarn.md, "Scale"); {@link #leaseLengthMs} keeps the
   * engine's lengths in that range.
   */
  public static final String LEASE_SPREAD_MS = PREFIX + "lease-spread-ms";
  public static final String GRACE_PERIOD_MS = PREFIX + "grace-period-ms";
  public static final String RENEW_AHEAD_MS = PREFIX + "renew-ahead-ms";
  public static final String SOLVER = PREFIX + "solver";
  public static final String IDEAL_TIME = PREFIX + "ideal-time";
  public static final String STARVATION = PREFIX + "starvation";
  public static final String PYTHON_EXECUTABLE = PREFIX + "python-executable";
  public static final String ENGINE_COMMAND = PREFIX + "engine-command";
  public static final String AGENT_PORT = PREFIX + "agent-port";
  public static final String AGENT_ADDRESS = PREFIX + "agent-address";
  public static final String AGENT_TLS_ENABLED = PREFIX + "agent-tls.enabled";
  public static final String AGENT_TLS_CERT = PREFIX + "agent-tls.cert-file";
  public static final String AGENT_TLS_KEY = PREFIX + "agent-tls.key-file";
  public static final String AGENT_TLS_TRUST = PREFIX + "agent-tls.trust-file";
  public static final String AGENT_BIND_HOST = PREFIX + "agent-bind-host";
  public static final String ENGINE_RESTART_BACKOFF_MS = PREFIX + "engine-restart-backoff-ms";
  public static final String ENGINE_RESTART_BACKOFF_MAX_MS = PREFIX + "engine-restart-backoff-max-ms";
  public static final String ENGINE_START_TIMEOUT_MS = PREFIX + "engine-start-timeout-ms";
  public static final String ROUND_TIMEOUT_MS = PREFIX + "round-timeout-ms";
  public static final String ROUND_INTERVAL_MS = PREFIX + "round-interval-ms";
  public static final String ENGINE_ENABLED = PREFIX + "engine-enabled";
  public static final String MONITOR_INTERVAL_MS = PREFIX + "monitor-interval-ms";
  public static final String FREED_ROUND_DELAY_MS = PREFIX + "freed-round-delay-ms";
  public static final String STOCK_APP_POLICY = PREFIX + "stock-app.policy";
  public static final String STOCK_APP_MAX_HOLD_MS = PREFIX + "stock-app.max-hold-ms";
  public static final String METRICS_TOP_APPS = PREFIX + "metrics.top-apps";
  public static final String LEASE_STORE = PREFIX + "lease-store";
  public static final String LEASE_STORE_FS_URI = PREFIX + "lease-store.fs.uri";
  public static final String LEASE_STORE_ZK_PATH = PREFIX + "lease-store.zk.parent-path";
  public static final String RECOVERY_SETTLE_MS = PREFIX + "recovery-settle-ms";
  public static final String MAX_APPS = PREFIX + "max-apps";

  /**
   * What happens to the GPU containers of an app whose AM does not speak to the agents'
   * endpoint (MapReduce, Spark, DistributedShell...) when its lease expires (docs/yarn.md).
   */
  public enum StockAppPolicy {
    /** Leases of running containers renew, up to {@code stock-app.max-hold-ms} per lease. */
    HOLD,
    /** Enforced as for Themis apps: preempted at expiry, killed after the grace period. */
    PREEMPT
  }

  /**
   * Solver chains and back-ends of themis.mechanism.solvers.make_solver usable in the RM
   * (themis.mechanism.solvers.SERVICE_SOLVERS).
   */
  public static final Set<String> SOLVERS =
      Collections.unmodifiableSet(new LinkedHashSet<>(EngineDefaults.SOLVERS));

  private final double fairnessKnob;
  private final long leaseDurationMs;
  private final long leaseSpreadMs;
  private final long gracePeriodMs;
  private final long renewAheadMs;
  private final String solver;
  private final String idealTime;
  private final String starvation;
  private final String pythonExecutable;
  private final String engineCommand;
  private final int agentPort;
  private final String agentAddress;
  private final boolean agentTls;
  private final String agentTlsCert;
  private final String agentTlsKey;
  private final String agentTlsTrust;
  private final String agentBindHost;
  private final boolean agentBindHostSet;
  private final long restartBackoffMs;
  private final long restartBackoffMaxMs;
  private final long engineStartTimeoutMs;
  private final long roundTimeoutMs;
  private final long roundIntervalMs;
  private final boolean engineEnabled;
  private final long monitorIntervalMs;
  private final long freedRoundDelayMs;
  private final StockAppPolicy stockAppPolicy;
  private final long stockAppMaxHoldMs;
  private final int metricsTopApps;
  private final String leaseStore;
  private final String leaseStoreFsUri;
  private final String leaseStoreZkPath;
  private final long recoverySettleMs;
  private final int maxApps;

  private ThemisSettings(Configuration conf) {
    fairnessKnob = readDouble(conf, FAIRNESS_KNOB, EngineDefaults.DEFAULT_FAIRNESS_KNOB);
    if (!(fairnessKnob >= 0.0 && fairnessKnob < 1.0)) {
      throw bad(FAIRNESS_KNOB, conf.get(FAIRNESS_KNOB), "must be in [0, 1)");
    }
    leaseDurationMs = readLong(conf, LEASE_DURATION_MS, EngineDefaults.DEFAULT_LEASE_DURATION_MS,
        1L);
    if (leaseDurationMs > EngineDefaults.MAX_LEASE_DURATION_MS) {
      throw bad(LEASE_DURATION_MS, conf.get(LEASE_DURATION_MS),
          "must be <= " + EngineDefaults.MAX_LEASE_DURATION_MS);
    }
    leaseSpreadMs = readLong(conf, LEASE_SPREAD_MS, leaseDurationMs / 2, 0L);
    if (leaseSpreadMs > leaseDurationMs) {
      throw bad(LEASE_SPREAD_MS, conf.get(LEASE_SPREAD_MS),
          "must be <= " + LEASE_DURATION_MS + " (" + leaseDurationMs + ")");
    }
    gracePeriodMs = readLong(conf, GRACE_PERIOD_MS, 30_000L, 0L);
    renewAheadMs = readLong(conf, RENEW_AHEAD_MS, 20_000L, 0L);
    String s = conf.getTrimmed(SOLVER, EngineDefaults.DEFAULT_SOLVER).toLowerCase(Locale.ROOT);
    if (!SOLVERS.contains(s)) {
      throw bad(SOLVER, conf.get(SOLVER), "must be one of " + String.join(", ", SOLVERS));
    }
    solver = s;
    // the form of T_id in rho (themis.mechanism.fairness.IdealTime), passed to the engine,
    // which announces it to the AMs' agents at registration
    String ideal = conf.getTrimmed(IDEAL_TIME, EngineDefaults.DEFAULT_IDEAL_TIME)
        .toLowerCase(Locale.ROOT);
    if (!EngineDefaults.IDEAL_TIMES.contains(ideal)) {
      throw bad(IDEAL_TIME, conf.get(IDEAL_TIME), "must be " + oneOf(EngineDefaults.IDEAL_TIMES));
    }
    idealTime = ideal;
    // how the (1-f) filter orders apps holding no GPU (themis.mechanism.fairness.Starvation),
    // passed to the engine, which announces it to the AMs' agents at registration
    String starve = conf.getTrimmed(STARVATION, EngineDefaults.DEFAULT_STARVATION)
        .toLowerCase(Locale.ROOT);
    if (!EngineDefaults.STARVATIONS.contains(starve)) {
      throw bad(STARVATION, conf.get(STARVATION), "must be " + oneOf(EngineDefaults.STARVATIONS));
    }
    starvation = starve;
    pythonExecutable = readNonEmpty(conf, PYTHON_EXECUTABLE, "python3");
    engineCommand = readNonEmpty(conf, ENGINE_COMMAND, "-m themis.yarn.engine");
    // With RM HA, this RM's own agent-port.<rm-id> / agent-address.<rm-id> come first (as
    // YARN's per-RM addresses): AMs try the endpoint of every RM id (docs/yarn.md, "Restart
    // and HA"), and two RMs on one host need two ports.
    String portKey = perRm(conf, AGENT_PORT);
    long port = readLong(conf, portKey, 8642L, 0L);
    if (port > 65535) {
      throw bad(portKey, conf.get(portKey), "must be a TCP port in [0, 65535] (0 = ephemeral)");
    }
    agentPort = (int) port;
    agentAddress = conf.getTrimmed(perRm(conf, AGENT_ADDRESS), "");
    if (!agentAddress.isEmpty() && !HOST_PORT.matcher(agentAddress).matches()) {
      throw bad(perRm(conf, AGENT_ADDRESS), agentAddress,
          "must be host:port (a name or address and a TCP port), e.g. rm1.example.com:8642");
    }
    // Where the agents' endpoint listens. As the RM's own RPC servers do: the explicit key,
    // else yarn.resourcemanager.bind-host, else the address of yarn.resourcemanager.hostname
    // (with RM HA the .<rm-id> forms first; 0.0.0.0 = every interface when the cluster leaves it at yarn-default's value).
    String bind = conf.getTrimmed(perRm(conf, AGENT_BIND_HOST), "");
    agentBindHostSet = !bind.isEmpty();
    if (bind.isEmpty()) {
      bind = conf.getTrimmed(RM_BIND_HOST, "");
    }
    if (bind.isEmpty()) {
      bind = conf.getTrimmed(perRm(conf, RM_HOSTNAME), "");
    }
    if (bind.isEmpty()) {
      bind = "0.0.0.0";
    }
    if (!HOST.matcher(bind).matches()) {
      throw bad(AGENT_BIND_HOST, bind, "must be a host name or an address (no port), e.g. 0.0.0.0");
    }
    agentBindHost = bind;
    // TLS of the agents' endpoint (docs/yarn.md, "Security"): on unless set to false
    String tls = conf.getTrimmed(AGENT_TLS_ENABLED, "true").toLowerCase(Locale.ROOT);
    if (!tls.equals("true") && !tls.equals("false")) {
      throw bad(AGENT_TLS_ENABLED, conf.get(AGENT_TLS_ENABLED), "must be true or false");
    }
    agentTls = tls.equals("true");
    agentTlsCert = conf.getTrimmed(AGENT_TLS_CERT, "");
    agentTlsKey = conf.getTrimmed(AGENT_TLS_KEY, "");
    String trust = conf.getTrimmed(AGENT_TLS_TRUST, "");
    agentTlsTrust = trust.isEmpty() ? agentTlsCert : trust;
    restartBackoffMs = readLong(conf, ENGINE_RESTART_BACKOFF_MS, 1_000L, 1L);
    restartBackoffMaxMs = readLong(conf, ENGINE_RESTART_BACKOFF_MAX_MS, 60_000L, 1L);
    if (restartBackoffMaxMs < restartBackoffMs) {
      throw bad(ENGINE_RESTART_BACKOFF_MAX_MS, conf.get(ENGINE_RESTART_BACKOFF_MAX_MS),
          "must be >= " + ENGINE_RESTART_BACKOFF_MS + " (" + restartBackoffMs + ")");
    }
    engineStartTimeoutMs = readLong(conf, ENGINE_START_TIMEOUT_MS, 60_000L, 1L);
    roundTimeoutMs = readLong(conf, ROUND_TIMEOUT_MS, 30_000L, 1L);
    roundIntervalMs = readLong(conf, ROUND_INTERVAL_MS, 1_000L, 1L);
    String enabled = conf.getTrimmed(ENGINE_ENABLED, "true").toLowerCase(Locale.ROOT);
    if (!enabled.equals("true") && !enabled.equals("false")) {
      throw bad(ENGINE_ENABLED, conf.get(ENGINE_ENABLED), "must be true or false");
    }
    engineEnabled = enabled.equals("true");
    monitorIntervalMs = readLong(conf, MONITOR_INTERVAL_MS, 1_000L, 1L);
    freedRoundDelayMs = readLong(conf, FREED_ROUND_DELAY_MS, 200L, 0L);
    String policy = conf.getTrimmed(STOCK_APP_POLICY, "hold").toLowerCase(Locale.ROOT);
    if (!policy.equals("hold") && !policy.equals("preempt")) {
      throw bad(STOCK_APP_POLICY, conf.get(STOCK_APP_POLICY), "must be hold or preempt");
    }
    stockAppPolicy = policy.equals("hold") ? StockAppPolicy.HOLD : StockAppPolicy.PREEMPT;
    stockAppMaxHoldMs = readLong(conf, STOCK_APP_MAX_HOLD_MS, 3_600_000L, 1L);
    // apps whose rho the metrics show (the worst K of the last round; bounded cardinality)
    long top = readLong(conf, METRICS_TOP_APPS, 10L, 0L);
    if (top > 1000) {
      throw bad(METRICS_TOP_APPS, conf.get(METRICS_TOP_APPS), "must be <= 1000");
    }
    metricsTopApps = (int) top;
    // where leases survive an RM restart when yarn.resourcemanager.recovery.enabled is true
    // (docs/yarn.md, "Restart and HA"); auto follows yarn.resourcemanager.store.class
    String store = conf.getTrimmed(LEASE_STORE, "auto").toLowerCase(Locale.ROOT);
    if (!store.equals("auto") && !store.equals("zk") && !store.equals("fs")
        && !store.equals("none")) {
      throw bad(LEASE_STORE, conf.get(LEASE_STORE), "must be auto, zk, fs or none");
    }
    leaseStore = store;
    leaseStoreFsUri = conf.getTrimmed(LEASE_STORE_FS_URI, "");
    String zkPath = conf.getTrimmed(LEASE_STORE_ZK_PATH, "/themis");
    if (!zkPath.startsWith("/") || (zkPath.length() > 1 && zkPath.endsWith("/"))
        || zkPath.contains("//")) {
      throw bad(LEASE_STORE_ZK_PATH, conf.get(LEASE_STORE_ZK_PATH),
          "must be an absolute ZooKeeper path such as /themis");
    }
    leaseStoreZkPath = zkPath.equals("/") ? "" : zkPath;
    recoverySettleMs = readLong(conf, RECOVERY_SETTLE_MS, 60_000L, 0L);
    // apps registered with the agents' endpoint at once; one more is refused with
    // RESOURCE_EXHAUSTED (themis.arbiter.state.ArbiterConfig.max_apps)
    long apps = readLong(conf, MAX_APPS, EngineDefaults.DEFAULT_MAX_APPS, 1L);
    if (apps > EngineDefaults.MAX_APPS_LIMIT) {
      throw bad(MAX_APPS, conf.get(MAX_APPS), "must be <= " + EngineDefaults.MAX_APPS_LIMIT);
    }
    maxApps = (int) apps;
  }

  /**
   * With TLS on (the default), the agents' endpoint's certificate chain and private key must be
   * readable PEM files; throws IllegalArgumentException naming the key and the problem. Checked
   * when the scheduler starts (not by {@link #from}, which only parses).
   */
  public void checkAgentTlsFiles() {
    if (!agentTls || !engineEnabled) {
      return;
    }
    checkPem(AGENT_TLS_CERT, agentTlsCert, "-----BEGIN CERTIFICATE");
    checkPem(AGENT_TLS_KEY, agentTlsKey, "PRIVATE KEY-----");
  }

  private static void checkPem(String key, String path, String marker) {
    if (path.isEmpty()) {
      throw bad(key, path, "must name a PEM file: the agents' endpoint serves TLS unless "
          + AGENT_TLS_ENABLED + " is false");
    }
    java.io.File f = new java.io.File(path);
    if (!f.isFile() || !f.canRead()) {
      throw bad(key, path, "no such readable file");
    }
    try {
      String text = new String(java.nio.file.Files.readAllBytes(f.toPath()),
          java.nio.charset.StandardCharsets.US_ASCII);
      if (!text.contains(marker)) {
        throw bad(key, path, "not a PEM file (no '" + marker + "' line)");
      }
    } catch (java.io.IOException e) {
      throw bad(key, path, "cannot read: " + e.getMessage());
    }
  }
  private static final String RM_HOSTNAME = "yarn.resourcemanager.hostname";
  private static final String RM_BIND_HOST = "yarn.resourcemanager.bind-host";
  /** A host name, an IPv4 address or an IPv6 address (brackets optional). */
  private static final String NAME = "[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?";
  private static final java.util.regex.Pattern HOST =
      java.util.regex.Pattern.compile(NAME + "|\\[?[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\\]?");
  private static final java.util.regex.Pattern HOST_PORT =
      java.util.regex.Pattern.compile("(" + NAME + "|\\[[0-9A-Fa-f:.]+\\]):[0-9]{1,5}");

  /** Reads and validates; throws IllegalArgumentException naming the first bad key. */
  public static ThemisSettings from(Configuration conf) {
    return new ThemisSettings(conf);
  }

  /** {@code key.<rm-id>} when RM HA is on, this RM has an id and that key is set; else key. */
  static String perRm(Configuration conf, String key) {
    String id = conf.getTrimmed(RM_HA_ID, "");
    if (conf.getBoolean(RM_HA_ENABLED, false) && !id.isEmpty()
        && conf.getTrimmed(key + "." + id) != null) {
      return key + "." + id;
    }
    return key;
  }

  private static IllegalArgumentException bad(String key, String value, String why) {
    return new IllegalArgumentException(
        "Themis: invalid value '" + value + "' for " + key + ": " + why);
  }

  private static double readDouble(Configuration conf, String key, double dflt) {
    String raw = conf.getTrimmed(key);
    if (raw == null || raw.isEmpty()) {
      return dflt;
    }
    try {
      double v = Double.parseDouble(raw);
      if (Double.isNaN(v) || Double.isInfinite(v)) {
        throw bad(key, raw, "must be a finite number");
      }
      return v;
    } catch (NumberFormatException e) {
      throw bad(key, raw, "not a number");
    }
  }

  private static long readLong(Configuration conf, String key, long dflt, long min) {
    String raw = conf.getTrimmed(key);
    if (raw == null || raw.isEmpty()) {
      return dflt;
    }
    long v;
    try {
      v = Long.parseLong(raw);
    } catch (NumberFormatException e) {
      throw bad(key, raw, "not an integer");
    }
    if (v < min) {
      throw bad(key, raw, "must be >= " + min);
    }
    return v;
  }

  /** "a or b" (or "a, b or c"). */
  private static String oneOf(List<String> names) {
    int last = names.size() - 1;
    return last <= 0 ? String.join("", names)
        : String.join(", ", names.subList(0, last)) + " or " + names.get(last);
  }

  private static String readNonEmpty(Configuration conf, String key, String dflt) {
    String raw = conf.get(key);
    if (raw == null) {
      return dflt;
    }
    if (raw.trim().isEmpty()) {
      throw bad(key, raw, "must not be empty");
    }
    return raw.trim();
  }

  public double fairnessKnob() { return fairnessKnob; }
  public long leaseDurationMs() { return leaseDurationMs; }

  /** How far apart the lengths of one round's leases are spread (ms; lease +- spread / 2). */
  public long leaseSpreadMs() { return leaseSpreadMs; }

  /**
   * The length of a lease the engine asked for, kept within lease +- spread / 2 (an engine
   * reply without one, or outside: the nearest length inside).
   */
  public long leaseLengthMs(long askedMs) {
    long lo = leaseDurationMs - leaseSpreadMs / 2;
    long hi = leaseDurationMs + leaseSpreadMs / 2;
    return Math.max(Math.max(1L, lo), Math.min(hi, askedMs));
  }
  public long gracePeriodMs() { return gracePeriodMs; }

  /**
   * How long before a lease of an app with a Themis agent ends the round that may renew it
   * in place runs (docs/yarn.md, "Renewal in place"): {@code renew-ahead-ms}, at most a
   * quarter of {@code lease-duration-ms}; 0: leases are not renewed in place.
   */
  public long renewAheadMs() { return Math.min(renewAheadMs, leaseDurationMs / 4); }
  public String solver() { return solver; }
  public String idealTime() { return idealTime; }
  public String starvation() { return starvation; }
  public String pythonExecutable() { return pythonExecutable; }
  public String engineCommand() { return engineCommand; }
  public int agentPort() { return agentPort; }
  public String agentAddress() { return agentAddress; }
  public boolean agentTls() { return agentTls; }
  public String agentTlsCert() { return agentTlsCert; }
  public String agentTlsKey() { return agentTlsKey; }
  /** CA certificate(s) AMs trust (default: the cert file, for a self-signed one). */
  public String agentTlsTrust() { return agentTlsTrust; }
  /** Where the agents' endpoint binds (see {@link #AGENT_BIND_HOST}). */
  public String agentBindHost() { return agentBindHost; }
  /** Whether {@link #AGENT_BIND_HOST} itself is set (it then wins over THEMIS_AGENT_HOST). */
  public boolean agentBindHostSet() { return agentBindHostSet; }
  public long restartBackoffMs() { return restartBackoffMs; }
  public long restartBackoffMaxMs() { return restartBackoffMaxMs; }
  public long engineStartTimeoutMs() { return engineStartTimeoutMs; }
  public long roundTimeoutMs() { return roundTimeoutMs; }
  public long roundIntervalMs() { return roundIntervalMs; }
  public boolean engineEnabled() { return engineEnabled; }
  public long monitorIntervalMs() { return monitorIntervalMs; }
  public long freedRoundDelayMs() { return freedRoundDelayMs; }
  public StockAppPolicy stockAppPolicy() { return stockAppPolicy; }
  public long stockAppMaxHoldMs() { return stockAppMaxHoldMs; }
  public int metricsTopApps() { return metricsTopApps; }
  /** auto, zk, fs or none. */
  public String leaseStore() { return leaseStore; }
  /** Directory of the fs lease store; empty: derived from the RM's state store. */
  public String leaseStoreFsUri() { return leaseStoreFsUri; }
  /** Parent of {@code <cluster-id>/leases} in ZooKeeper ("" for the root). */
  public String leaseStoreZkPath() { return leaseStoreZkPath; }
  public long recoverySettleMs() { return recoverySettleMs; }
  /** Apps registered at once (see {@link #MAX_APPS}). */
  public int maxApps() { return maxApps; }
}
