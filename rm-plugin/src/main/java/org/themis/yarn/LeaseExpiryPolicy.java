package org.themis.yarn;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.server.resourcemanager.RMContext;
import org.apache.hadoop.yarn.server.resourcemanager.monitor.SchedulingEditPolicy;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.ResourceScheduler;
import org.themis.yarn.lease.LeaseEnforcer;

/**
 * Scheduling edit policy (yarn.resourcemanager.scheduler.monitor.policies) that runs a lease
 * enforcement pass: MARK_CONTAINER_FOR_PREEMPTION at expiry, MARK_CONTAINER_FOR_KILLABLE after
 * the grace period. The work itself lives in {@link LeaseEnforcer#enforceLeases()}, which
 * ThemisCapacityScheduler also runs on its own thread every monitor-interval-ms, so listing
 * this policy is optional: it only adds passes (serialised with the built-in ones).
 */
public class LeaseExpiryPolicy implements SchedulingEditPolicy {
  private ThemisCapacityScheduler scheduler;
  private long intervalMs = 1000;

  @Override
  public void init(Configuration config, RMContext context, ResourceScheduler sched) {
    if (!(sched instanceof ThemisCapacityScheduler)) {
      throw new IllegalArgumentException(getClass().getName() + " needs "
          + "yarn.resourcemanager.scheduler.class=" + ThemisCapacityScheduler.class.getName()
          + ", found " + (sched == null ? "null" : sched.getClass().getName()));
    }
    scheduler = (ThemisCapacityScheduler) sched;
    intervalMs = ThemisSettings.from(config).monitorIntervalMs();
  }

  @Override
  public void editSchedule() {
    ThemisRuntime rt = scheduler.runtime();
    if (rt != null) {
      rt.enforcer().enforceLeases();
    }
  }

  @Override
  public long getMonitoringInterval() {
    return intervalMs;
  }

  @Override
  public String getPolicyName() {
    return "ThemisLeaseExpiryPolicy";
  }
}
