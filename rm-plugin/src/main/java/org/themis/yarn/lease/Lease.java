package org.themis.yarn.lease;

import java.util.Objects;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;

/**
 * One GPU lease: {@code gpus} GPUs on {@code node} for {@code app} until {@code expiryMs}.
 * After expiry the lease is EXPIRING until {@code graceDeadlineMs}; it no longer admits new
 * containers, and its containers are killed at the deadline unless released before.
 * {@code partition} is the YARN partition (node label, "" for the default partition) of the
 * node when the lease was granted (docs/yarn.md, "Partitions").
 * (An immutable value class with record-style accessors: the jar targets Java 8.)
 */
public final class Lease {
  private final long id;
  private final ApplicationId app;
  private final NodeId node;
  private final int gpus;
  private final long grantedAtMs;
  private final long expiryMs;
  private final State state;
  private final long graceDeadlineMs;
  private final String partition;

  /** A lease in the default partition. */
  public Lease(long id, ApplicationId app, NodeId node, int gpus, long grantedAtMs,
      long expiryMs, State state, long graceDeadlineMs) {
    this(id, app, node, gpus, grantedAtMs, expiryMs, state, graceDeadlineMs, "");
  }

  public Lease(long id, ApplicationId app, NodeId node, int gpus, long grantedAtMs,
      long expiryMs, State state, long graceDeadlineMs, String partition) {
    this.id = id;
    this.app = app;
    this.node = node;
    this.gpus = gpus;
    this.grantedAtMs = grantedAtMs;
    this.expiryMs = expiryMs;
    this.state = state;
    this.graceDeadlineMs = graceDeadlineMs;
    this.partition = partition == null ? "" : partition;
  }

  public enum State { ACTIVE, EXPIRING }

  public long id() {
    return id;
  }

  public ApplicationId app() {
    return app;
  }

  public NodeId node() {
    return node;
  }

  public int gpus() {
    return gpus;
  }

  public long grantedAtMs() {
    return grantedAtMs;
  }

  public long expiryMs() {
    return expiryMs;
  }

  public State state() {
    return state;
  }

  public long graceDeadlineMs() {
    return graceDeadlineMs;
  }

  /** The node's partition (node label) at the grant, "" for the default partition. */
  public String partition() {
    return partition;
  }

  public boolean isLive(long nowMs) {
    return state == State.ACTIVE && nowMs < expiryMs;
  }

  Lease withGpus(int n) {
    return new Lease(id, app, node, n, grantedAtMs, expiryMs, state, graceDeadlineMs,
        partition);
  }

  Lease expiring(long graceDeadline) {
    return new Lease(id, app, node, gpus, grantedAtMs, expiryMs, State.EXPIRING, graceDeadline,
        partition);
  }

  @Override
  public boolean equals(Object o) {
    if (this == o) {
      return true;
    }
    if (!(o instanceof Lease)) {
      return false;
    }
    Lease l = (Lease) o;
    return id == l.id && gpus == l.gpus && grantedAtMs == l.grantedAtMs
        && expiryMs == l.expiryMs && graceDeadlineMs == l.graceDeadlineMs
        && Objects.equals(app, l.app) && Objects.equals(node, l.node) && state == l.state
        && partition.equals(l.partition);
  }

  @Override
  public int hashCode() {
    return Objects.hash(id, app, node, gpus, grantedAtMs, expiryMs, state, graceDeadlineMs,
        partition);
  }

  @Override
  public String toString() {
    return "Lease[id=" + id + ", app=" + app + ", node=" + node + ", gpus=" + gpus
        + ", grantedAtMs=" + grantedAtMs + ", expiryMs=" + expiryMs + ", state=" + state
        + ", graceDeadlineMs=" + graceDeadlineMs
        + (partition.isEmpty() ? "" : ", partition=" + partition) + "]";
  }
}
