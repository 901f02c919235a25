package org.themis.yarn.status;

/**
 * Read-only view of the plugin, registered as {@code Hadoop:service=ResourceManager,name=Themis}
 * and served by the RM's web server as JSON at {@code /jmx?qry=Hadoop:service=ResourceManager,name=Themis}
 * ({@code themis status --all} reads it).
 */
public interface ThemisStatusMXBean {
  /**
   * JSON: {@code now_ms}, lease and stock-app settings, {@code rounds}, {@code nodes}
   * (total and grantable GPUs), {@code leases} (id, app, node, GPUs, grant time, expiry, state)
   * and {@code apps} that hold or ask GPUs (agent or not, container asks, GPUs of running
   * containers per node, the wait reason shown in their diagnostics).
   */
  String getStatusJson();

  /** Rounds run since the RM started. */
  long getRounds();

  /** Leases renewed under the stock-app policy {@code hold}. */
  long getLeaseRenewals();

  /** {@code hold} or {@code preempt} ({@code yarn.resourcemanager.themis.stock-app.policy}). */
  String getStockAppPolicy();
}
