package org.themis.yarn.engine;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import py4j.GatewayServer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.themis.yarn.ThemisEngine;
import org.themis.yarn.ThemisSettings;

/**
 * Starts and supervises the Python engine: one child process per incarnation, each with a fresh
 * Py4J GatewayServer on loopback, port 0, and a fresh auth token. A dead, hung or failing
 * engine is killed and restarted with exponential back-off; callers just see an empty reply.
 */
public final class EngineSupervisor {
  private static final Logger LOG = LoggerFactory.getLogger(EngineSupervisor.class);

  private final ThemisSettings settings;
  private final ExecutorService caller = Executors.newSingleThreadExecutor(r -> {
    Thread t = new Thread(r, "themis-engine-call");
    t.setDaemon(true);
    return t;
  });
  private final AtomicLong starts = new AtomicLong();
  private final AtomicLong failures = new AtomicLong();
  private volatile Incarnation current;
  /**
   * Set once by {@link #stop()}: no engine starts afterwards, and one that was being started
   * when it was set is killed (an RM going standby must leave no agents' endpoint behind).
   */
  private volatile boolean stopped;
  private volatile boolean inRound;
  private volatile String agentAddress = "";
  /** The engine's last output lines (all incarnations), for error messages and tests. */
  private final java.util.ArrayDeque<String> recent = new java.util.ArrayDeque<>();
  private static final int RECENT_LINES = 60;
  private long consecutiveFailures;
  private long nextStartAtMs;

  /** One engine process and its gateway. */
  private static final class Incarnation {
    final GatewayServer server;
    final Process process;
    final CountDownLatch registered = new CountDownLatch(1);
    volatile ThemisEngine engine;

    Incarnation(GatewayServer server, Process process) {
      this.server = server;
      this.process = process;
    }
  }

  /**
   * What the agents' endpoint in the engine tells the RM about application masters (calls from
   * Python through the gateway; strings only, like {@link ThemisEngine}).
   */
  public interface AgentEvents {
    /** An AM registered with the agents' endpoint: from now on it speaks for its app's leases. */
    void agentJoined(String appId);

    /** An AM left the agents' endpoint (UnregisterApp): its app's leases end now. */
    void agentLeft(String appId);

    /**
     * An AM gave back leased GPUs (ReleaseGpus), as a JSON array of {@code <node_id>/<k>} ids.
     * Returns JSON {@code {"ok": true, "released": n}} or {@code {"ok": false, "error": ...}}.
     */
    String releaseGpus(String appId, String gpuIdsJson);

    /**
     * Whether {@code token} (the AM's AMRMToken, URL-safe encoded) proves that the caller
     * registering {@code appId} is that app's running AM ({@link AmTokens}). Returns JSON
     * {@code {"ok": true}} or {@code {"ok": false, "error": ...}}.
     */
    String verifyAmToken(String appId, String token);

    /**
     * The app's live leases, for its agent's Hello (an agent that connects again, or to a
     * restarted engine, learns the leases it holds): a JSON array of
     * {@code {"node_id", "gpus", "expiry_ms"}}, empty for an unknown app.
     */
    String appLeases(String appId);
  }

  /** The Py4J entry point the Python process calls to register itself and report agents. */
  public static final class Registry {
    private volatile Incarnation owner;
    private final GatewayServerHolder holder = new GatewayServerHolder();
    private final AgentEvents events;

    Registry(AgentEvents events) {
      this.events = events;
    }

    public void agentJoined(String appId) {
      events.agentJoined(appId);
    }

    public void agentLeft(String appId) {
      events.agentLeft(appId);
    }

    public String releaseGpus(String appId, String gpuIdsJson) {
      return events.releaseGpus(appId, gpuIdsJson);
    }

    public String verifyAmToken(String appId, String token) {
      return events.verifyAmToken(appId, token);
    }

    public String appLeases(String appId) {
      return events.appLeases(appId);
    }

    /** Called from Python with its callback object and callback server port. */
    public void register(ThemisEngine engine, int callbackPort) {
      Incarnation inc = owner;
      if (inc == null) {
        throw new IllegalStateException("no engine incarnation waiting for registration");
      }
      holder.server.resetCallbackClient(InetAddress.getLoopbackAddress(), callbackPort);
      inc.engine = engine;
      inc.registered.countDown();
      LOG.info("Themis engine registered (callback port {})", callbackPort);
    }
  }

  private static final class GatewayServerHolder {
    volatile GatewayServer server;
  }

  private final AgentEvents events;

  public EngineSupervisor(ThemisSettings settings, AgentEvents events) {
    this.settings = settings;
    this.events = events;
  }

  public long starts() { return starts.get(); }
  public long failures() { return failures.get(); }
  public boolean inRound() { return inRound; }

  /** The last lines the engine process printed (stdout and stderr), oldest first. */
  public List<String> recentOutput() {
    synchronized (recent) {
      return new ArrayList<>(recent);
    }
  }

  private void remember(String line) {
    synchronized (recent) {
      if (recent.size() >= RECENT_LINES) {
        recent.removeFirst();
      }
      recent.addLast(line);
    }
  }

  /** PID of the live engine process, or -1. */
  public long pid() {
    Incarnation inc = current;
    return inc != null && inc.process.isAlive() ? pidOf(inc.process) : -1;
  }

  /**
   * A process's PID, or -1: {@code Process.pid()} on Java 9+, the {@code pid} field of Java 8's
   * {@code java.lang.UNIXProcess} otherwise (the jar targets Java 8, which has no PID API).
   */
  static long pidOf(Process p) {
    try {
      return ((Number) Process.class.getMethod("pid").invoke(p)).longValue();
    } catch (ReflectiveOperationException | RuntimeException e) {
      try {
        java.lang.reflect.Field f = p.getClass().getDeclaredField("pid");
        f.setAccessible(true);
        return f.getLong(p);
      } catch (ReflectiveOperationException | RuntimeException e2) {
        return -1;
      }
    }
  }

  /** Sends one round to the engine; empty when the engine is unavailable or failed. */
  public synchronized Optional<String> runRound(String requestJson) {
    Incarnation inc = ensureStarted();
    if (inc == null) {
      return Optional.empty();
    }
    inRound = true;
    try {
      Future<String> f = caller.submit(() -> inc.engine.runRound(requestJson));
      String reply = f.get(settings.roundTimeoutMs(), TimeUnit.MILLISECONDS);
      consecutiveFailures = 0;
      return Optional.ofNullable(reply);
    } catch (TimeoutException e) {
      fail(inc, "round timed out after " + settings.roundTimeoutMs() + " ms", null);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      fail(inc, "interrupted", null);
    } catch (Exception e) {
      fail(inc, "round failed", e);
    } finally {
      inRound = false;
    }
    return Optional.empty();
  }

  /**
   * Ends the app's registration with the agents' endpoint (its app or AM attempt ended), on
   * the engine-call thread, without waiting; nothing to do when no engine runs (a new engine
   * starts without registrations).
   */
  public void appEnded(String appId) {
    Incarnation inc = current;
    if (inc == null || inc.engine == null) {
      return;
    }
    try {
      caller.submit(() -> {
        try {
          inc.engine.appEnded(appId);
        } catch (RuntimeException e) {
          LOG.warn("could not end {}'s registration with the agents' endpoint: {}", appId,
              e.toString());
        }
      });
    } catch (java.util.concurrent.RejectedExecutionException e) {
      // stopping: the engine goes away with its registrations
    }
  }

  /**
   * Starts a dead engine again (after its back-off) although no round needs it yet: the
   * AMs' agents must register with the new engine's endpoint before the next round, which
   * would otherwise grant leases to apps whose agents never hear of them. No-op while the
   * engine runs or a restart waits for its back-off. Called by the round loop at every tick.
   */
  public synchronized void supervise() {
    if (stopped) {
      return;
    }
    Incarnation inc = current;
    if (inc != null && inc.process.isAlive() && inc.engine != null) {
      return;
    }
    if (inc == null && System.currentTimeMillis() < nextStartAtMs) {
      return;
    }
    ensureStarted();
  }

  /** Health probe through the same path; empty when unavailable. */
  public synchronized Optional<String> health() {
    Incarnation inc = ensureStarted();
    if (inc == null) {
      return Optional.empty();
    }
    try {
      return Optional.ofNullable(caller.submit(() -> inc.engine.health())
          .get(settings.roundTimeoutMs(), TimeUnit.MILLISECONDS));
    } catch (Exception e) {
      fail(inc, "health probe failed", e);
      return Optional.empty();
    }
  }

  private Incarnation ensureStarted() {
    Incarnation inc = current;
    if (inc != null && inc.process.isAlive() && inc.engine != null) {
      return inc;
    }
    if (inc != null) {
      fail(inc, "engine process exited (code "
          + (inc.process.isAlive() ? "?" : inc.process.exitValue()) + ")", null);
    }
    long now = System.currentTimeMillis();
    if (stopped || now < nextStartAtMs) {
      return null;
    }
    try {
      inc = launch();
    } catch (IOException | RuntimeException e) {
      scheduleRestart("could not start engine: " + e.getMessage());
      return null;
    }
    current = inc;
    // stop() sets the flag, then reads current; here current is set, then the flag read: one
    // of the two sees the other, so an engine started concurrently with stop() is killed
    if (stopped) {
      abandon(inc, "the supervisor was stopped while the engine started");
      return null;
    }
    try {
      // Wait for registration, but notice at once an engine that dies while starting
      // (a missing Python module, a bad engine command): its output is in the RM log.
      long deadline = System.currentTimeMillis() + settings.engineStartTimeoutMs();
      while (!inc.registered.await(100, TimeUnit.MILLISECONDS)) {
        if (stopped) {
          abandon(inc, "the supervisor was stopped while the engine started");
          return null;
        }
        if (!inc.process.isAlive()) {
          fail(inc, "engine exited with code " + inc.process.exitValue()
              + " before registering; last output: " + String.join(" | ", recentOutput()), null);
          return null;
        }
        if (System.currentTimeMillis() > deadline) {
          fail(inc, "engine did not register within " + settings.engineStartTimeoutMs()
              + " ms", null);
          return null;
        }
      }
      readAgentAddress(inc);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      fail(inc, "interrupted while waiting for the engine", null);
      return null;
    }
    return inc;
  }

  private static final com.fasterxml.jackson.databind.ObjectMapper JSON =
      new com.fasterxml.jackson.databind.ObjectMapper();

  /** The engine's gRPC endpoint for AMs, as it reports in its health JSON. */
  private void readAgentAddress(Incarnation inc) {
    try {
      String h = caller.submit(() -> inc.engine.health())
          .get(settings.roundTimeoutMs(), TimeUnit.MILLISECONDS);
      agentAddress = h == null ? "" : JSON.readTree(h).path("agent_address").asText("");
      if (agentAddress.isEmpty()) {
        LOG.warn("Themis engine serves no agents' endpoint (agent-port < 0?)");
      } else {
        LOG.info("Themis agents' endpoint (gRPC) for application masters: {}", agentAddress);
      }
    } catch (Exception e) {
      LOG.warn("could not read the engine's agent address", e);
    }
  }

  /** host:port of the gRPC endpoint AMs talk to ("" until the engine is up, or if disabled). */
  public String agentAddress() { return agentAddress; }

  private Incarnation launch() throws IOException {
    byte[] raw = new byte[24];
    new SecureRandom().nextBytes(raw);
    StringBuilder hex = new StringBuilder(2 * raw.length);
    for (byte b : raw) {
      hex.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
    }
    String token = hex.toString();
    Registry registry = new Registry(events);
    InetAddress lo = InetAddress.getLoopbackAddress();
    GatewayServer server = new GatewayServer.GatewayServerBuilder()
        .entryPoint(registry)
        .javaPort(0)
        .javaAddress(lo)
        .authToken(token)
        .callbackClient(GatewayServer.DEFAULT_PYTHON_PORT, lo, token)
        .build();
    registry.holder.server = server;
    server.start(true);
    int port = server.getListeningPort();
    List<String> cmd = new ArrayList<>();
    cmd.add(settings.pythonExecutable());
    for (String part : settings.engineCommand().trim().split("\\s+")) {
      cmd.add(part);
    }
    ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
    Map<String, String> env = pb.environment();
    env.put("THEMIS_GATEWAY_PORT", Integer.toString(port));
    env.put("THEMIS_GATEWAY_TOKEN", token);
    env.put("THEMIS_FAIRNESS_KNOB", Double.toString(settings.fairnessKnob()));
    env.put("THEMIS_SOLVER", settings.solver());
    env.put("THEMIS_IDEAL_TIME", settings.idealTime());
    env.put("THEMIS_STARVATION", settings.starvation());
    env.put("THEMIS_AGENT_PORT", Integer.toString(settings.agentPort()));
    // agent-bind-host when set; else THEMIS_AGENT_HOST of the RM's environment (yarn-env.sh);
    // else the RM's bind-host / hostname (ThemisSettings)
    if (settings.agentBindHostSet() || !env.containsKey("THEMIS_AGENT_HOST")) {
      env.put("THEMIS_AGENT_HOST", settings.agentBindHost());
    }
    env.put("THEMIS_LEASE_MS", Long.toString(settings.leaseDurationMs()));
    env.put("THEMIS_MAX_APPS", Integer.toString(settings.maxApps()));
    // TLS of the agents' endpoint (docs/yarn.md, "Security"): on unless agent-tls.enabled=false
    env.put("THEMIS_AGENT_TLS", settings.agentTls() ? "on" : "off");
    env.put("THEMIS_AGENT_TLS_CERT", settings.agentTlsCert());
    env.put("THEMIS_AGENT_TLS_KEY", settings.agentTlsKey());
    Process p;
    try {
      p = pb.start();
    } catch (IOException e) {
      server.shutdown();
      throw new IOException("cannot run '" + String.join(" ", cmd) + "' (set "
          + ThemisSettings.PYTHON_EXECUTABLE + " / " + ThemisSettings.ENGINE_COMMAND + "): "
          + e.getMessage(), e);
    }
    Incarnation inc = new Incarnation(server, p);
    registry.owner = inc;
    starts.incrementAndGet();
    pump(p);
    LOG.info("Themis engine started: pid {}, gateway 127.0.0.1:{}, command {}", pidOf(p), port,
        cmd);
    return inc;
  }

  private void pump(Process p) {
    long pid = pidOf(p);
    Thread t = new Thread(() -> {
      try (BufferedReader r = new BufferedReader(
          new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
        String line;
        while ((line = r.readLine()) != null) {
          LOG.info("[engine {}] {}", pid, line);
          remember("[engine " + pid + "] " + line);
        }
      } catch (IOException e) {
        // process gone
      }
    }, "themis-engine-log-" + pid);
    t.setDaemon(true);
    t.start();
  }

  private void fail(Incarnation inc, String why, Exception cause) {
    failures.incrementAndGet();
    if (cause != null) {
      LOG.error("Themis engine failure: {}; current leases are kept", why, cause);
    } else {
      LOG.error("Themis engine failure: {}; current leases are kept", why);
    }
    destroy(inc);
    if (current == inc) {
      current = null;
    }
    scheduleRestart(why);
  }

  private void scheduleRestart(String why) {
    if (stopped) {
      return; // no restart after stop()
    }
    consecutiveFailures++;
    long backoff = settings.restartBackoffMs();
    for (long i = 1; i < consecutiveFailures && backoff < settings.restartBackoffMaxMs(); i++) {
      backoff *= 2;
    }
    backoff = Math.min(backoff, settings.restartBackoffMaxMs());
    nextStartAtMs = System.currentTimeMillis() + backoff;
    LOG.warn("Themis engine will be restarted in {} ms ({})", backoff, why);
  }

  private static void destroy(Incarnation inc) {
    inc.process.destroyForcibly();
    try {
      inc.process.waitFor(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    try {
      inc.server.shutdown();
    } catch (RuntimeException e) {
      LOG.debug("gateway shutdown", e);
    }
  }

  /** Kills an engine started by this supervisor after {@link #stop()}; no restart. */
  private void abandon(Incarnation inc, String why) {
    LOG.info("Themis engine pid {} killed: {}", pidOf(inc.process), why);
    destroy(inc);
    if (current == inc) {
      current = null;
    }
  }

  /**
   * Kills the engine and the gateway; no engine starts afterwards (a call in progress that
   * is starting one kills it).
   */
  public void stop() {
    stopped = true;
    Incarnation inc = current;
    current = null;
    caller.shutdownNow();
    if (inc != null) {
      destroy(inc);
    }
  }
}
