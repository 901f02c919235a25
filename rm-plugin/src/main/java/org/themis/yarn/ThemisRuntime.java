package org.themis.yarn;

import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.themis.yarn.engine.AgentGateway;
import org.themis.yarn.engine.EngineSupervisor;
import org.themis.yarn.lease.LeaseEnforcer;
import org.themis.yarn.lease.LeaseTable;
import org.themis.yarn.round.ClusterView;
import org.themis.yarn.round.RoundDriver;
import org.themis.yarn.status.ThemisMetrics;
import org.themis.yarn.status.ThemisStatus;
import org.themis.yarn.status.WaitDiagnostics;

/**
 * The plugin's moving parts inside the RM, wired together and started and stopped with the
 * scheduler (on the active RM only):
 *
 * <ul>
 * <li>{@link LeaseEnforcer}: lease expiry on its own thread, whatever the scheduling-monitor
 *     keys say, with the stock-app policy;</li>
 * <li>{@link RoundDriver}: the round driver thread (cluster view out, validated grants in,
 *     apps' wait diagnostics), over {@link ClusterView};</li>
 * <li>{@link AgentGateway}: the AMs' agents as the engine reports them, and the early lease
 *     ends (app finished, container of an agent-less app ended, GPUs released by an AM);</li>
 * <li>{@link EngineSupervisor}: the Python engine process and its Py4J gateway;</li>
 * <li>{@link ThemisStatus} and {@link ThemisMetrics}: the read-only status bean
 *     ({@code Hadoop:service=ResourceManager,name=Themis} in the RM's {@code /jmx}) and the
 *     metrics2 source.</li>
 * </ul>
 *
 * The parts reach each other through this object.
 */
public final class ThemisRuntime {
  private static final Logger LOG = LoggerFactory.getLogger(ThemisRuntime.class);

  private final ThemisCapacityScheduler scheduler;
  private final ThemisSettings settings;
  private final LeaseTable leases;
  private final AgentGateway agents;
  private final EngineSupervisor engine;
  private final ClusterView cluster;
  private final WaitDiagnostics waits;
  private final ThemisMetrics metrics;
  private final RoundDriver driver;
  private final LeaseEnforcer enforcer;
  private final ThemisStatus status;
  private final AtomicLong gpusEndedEarly = new AtomicLong();
  private volatile boolean running;

  ThemisRuntime(ThemisCapacityScheduler scheduler, ThemisSettings settings, LeaseTable leases) {
    this.scheduler = scheduler;
    this.settings = settings;
    this.leases = leases;
    this.agents = new AgentGateway(this);
    this.engine = new EngineSupervisor(settings, agents);
    this.cluster = new ClusterView(scheduler, settings, leases, agents::hasAgent);
    this.waits = new WaitDiagnostics(settings);
    this.metrics = new ThemisMetrics(this);
    this.driver = new RoundDriver(this, cluster);
    this.enforcer = new LeaseEnforcer(this);
    this.status = new ThemisStatus(this);
  }

  void start() {
    running = true;
    enforcer.start();
    // read-only status (leases, asks, wait reasons) in the RM's /jmx
    status.register();
    // metrics2 source (Hadoop:service=ResourceManager,name=ThemisMetrics, any metrics2 sink)
    metrics.register();
    if (!settings.engineEnabled()) {
      LOG.warn("Themis engine disabled ({}=false): no rounds run; leases only change through the "
          + "Java API", ThemisSettings.ENGINE_ENABLED);
      return;
    }
    driver.start();
  }

  void stop() {
    running = false;
    status.unregister();
    metrics.unregister();
    enforcer.stop();
    driver.stop();
    engine.stop();
  }

  /** Started and not stopped: on the active RM only (with RM HA a standby never starts it). */
  public boolean running() { return running; }
  public ThemisCapacityScheduler scheduler() { return scheduler; }
  public ThemisSettings settings() { return settings; }
  public LeaseTable leases() { return leases; }
  /** The AMs' agents and the early lease ends. */
  public AgentGateway agents() { return agents; }
  public EngineSupervisor engine() { return engine; }
  /** Free GPUs, apps' GPUs, the engine's cluster view. */
  public ClusterView cluster() { return cluster; }
  /** The apps' wait reasons in their YARN diagnostics. */
  public WaitDiagnostics waits() { return waits; }
  /** The metrics2 source (docs/yarn.md, Metrics). */
  public ThemisMetrics metrics() { return metrics; }
  public RoundDriver driver() { return driver; }
  public LeaseEnforcer enforcer() { return enforcer; }
  /** The status bean (JMX). */
  public ThemisStatus status() { return status; }

  /** GPUs whose lease ended before its expiry (app finished, container ended, AM release). */
  public long gpusEndedEarly() { return gpusEndedEarly.get(); }

  /** {@code gpus} leased GPUs ended before their lease's expiry (counted for the metrics). */
  public void countEndedEarly(long gpus) {
    gpusEndedEarly.addAndGet(gpus);
  }
}
