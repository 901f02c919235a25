package org.themis.yarn;

import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;

/**
 * One GPU lease: {@code gpus} GPUs on {@code node} for {@code app} until {@code expiryMs}.
 * After expiry the lease is EXPIRING until {@code graceDeadlineMs}; it no longer admits new
 * containers, and its containers are killed at the deadline unless released before.
 */
public record Lease(long id, ApplicationId app, NodeId node, int gpus, long grantedAtMs,
    long expiryMs, State state, long graceDeadlineMs) {

  public enum State { ACTIVE, EXPIRING }

  public boolean isLive(long nowMs) {
    return state == State.ACTIVE && nowMs < expiryMs;
  }

  Lease withGpus(int n) {
    return new Lease(id, app, node, n, grantedAtMs, expiryMs, state, graceDeadlineMs);
  }

  Lease expiring(long graceDeadline) {
    return new Lease(id, app, node, gpus, grantedAtMs, expiryMs, State.EXPIRING, graceDeadline);
  }
}
