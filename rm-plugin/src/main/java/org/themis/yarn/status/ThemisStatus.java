package org.themis.yarn.status;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import javax.management.ObjectName;
import org.apache.hadoop.metrics2.util.MBeans;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;
import org.themis.yarn.Gpus;
import org.themis.yarn.ThemisRuntime;
import org.themis.yarn.ThemisSettings;
import org.themis.yarn.lease.Lease;
import org.themis.yarn.lease.LeaseTable;
import org.themis.yarn.round.AppGpus;
import org.themis.yarn.round.NodePartitions;

/**
 * The read-only status bean, {@code Hadoop:service=ResourceManager,name=Themis} in the RM's
 * {@code /jmx} ({@code themis status --all} reads it): settings, nodes, leases, and the apps
 * that hold or ask GPUs with the wait reason shown in their diagnostics; each node, lease and
 * app with its partition (node label, "" for the default partition).
 */
public final class ThemisStatus implements ThemisStatusMXBean {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final ThemisRuntime runtime;
  private final ThemisSettings settings;
  private final LeaseTable leases;
  private volatile ObjectName bean;

  public ThemisStatus(ThemisRuntime runtime) {
    this.runtime = runtime;
    this.settings = runtime.settings();
    this.leases = runtime.leases();
  }

  /** Registers the bean; a second RM in the same JVM (tests) logs a warning and goes without. */
  public void register() {
    bean = MBeans.register("ResourceManager", "Themis", this);
  }

  public void unregister() {
    ObjectName b = bean;
    if (b != null) {
      MBeans.unregister(b);
      bean = null;
    }
  }

  @Override
  public String getStatusJson() {
    long now = leases.now();
    ObjectNode root = JSON.createObjectNode();
    root.put("now_ms", now);
    root.put("lease_duration_ms", settings.leaseDurationMs());
    root.put("grace_period_ms", settings.gracePeriodMs());
    root.put("stock_app_policy", settings.stockAppPolicy().name().toLowerCase());
    root.put("stock_app_max_hold_ms", settings.stockAppMaxHoldMs());
    root.put("rounds", runtime.driver().rounds());
    // where AMs' agents reach this RM's agents' endpoint ("" while the engine is not up)
    root.put("agent_address", runtime.engine().agentAddress());
    Map<NodeId, Long> free = runtime.cluster().grantableGpus();
    NodePartitions parts = runtime.cluster().nodePartitions();
    ArrayNode nodes = root.putArray("nodes");
    for (FiCaSchedulerNode n : runtime.scheduler().getNodeTracker().getAllNodes()) {
      ObjectNode o = nodes.addObject();
      o.put("node_id", n.getNodeID().toString());
      o.put("total_gpus", Gpus.of(n.getTotalResource()));
      o.put("grantable_gpus", free.getOrDefault(n.getNodeID(), 0L));
      o.put("partition", parts.of(n.getNodeID())); // node label, "" the default partition
    }
    List<Lease> all = leases.snapshot();
    Set<ApplicationId> leased = new HashSet<>();
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
      o.put("partition", l.partition());
      if (l.state() == Lease.State.EXPIRING) {
        o.put("grace_deadline_ms", l.graceDeadlineMs());
      }
    }
    ArrayNode apps = root.putArray("apps");
    Map<ApplicationId, WaitDiagnostics.Reason> shown = runtime.waits().shown();
    for (AppGpus a : runtime.cluster().appGpus()) {
      if (a.asks().isEmpty() && a.running().isEmpty() && !leased.contains(a.app())) {
        continue; // holds and asks no GPU
      }
      ObjectNode o = apps.addObject();
      o.put("app_id", a.app().toString());
      o.put("agent", a.agent());
      o.put("asked_gpus", a.askedGpus());
      o.put("partition", a.partition());
      a.putGpuUse(o);
      WaitDiagnostics.Reason r = shown.get(a.app());
      o.put("reason", r == null ? "" : r.kind());
      o.put("diagnostics", r == null ? "" : r.text());
    }
    return root.toString();
  }

  @Override
  public long getRounds() {
    return runtime.driver().rounds();
  }

  @Override
  public long getLeaseRenewals() {
    return runtime.enforcer().renewals();
  }

  @Override
  public String getStockAppPolicy() {
    return settings.stockAppPolicy().name().toLowerCase();
  }
}
