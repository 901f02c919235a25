package org.themis.yarn.round;

import java.util.Collections;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.hadoop.yarn.api.records.NodeId;

/**
 * Which nodes' GPUs an app may be leased, by partition (docs/yarn.md, "Partitions"), for the
 * wait diagnostics and the status bean: a node serves the apps of its own partition, and a
 * node of a non-exclusive partition also serves default-partition apps (its idle GPUs). The
 * engine's rounds apply the same rule (themis/yarn/partitions.py).
 */
public final class NodePartitions {
  private final Map<NodeId, String> of;
  private final Set<String> nonExclusive;
  private final Map<NodeId, Long> totals;

  /** {@code of}: node -> partition; {@code totals}: node -> its GPUs. */
  public NodePartitions(Map<NodeId, String> of, Set<String> nonExclusive,
      Map<NodeId, Long> totals) {
    this.of = Collections.unmodifiableMap(new TreeMap<NodeId, String>(of));
    this.nonExclusive = Collections.unmodifiableSet(new TreeSet<String>(nonExclusive));
    this.totals = Collections.unmodifiableMap(new TreeMap<NodeId, Long>(totals));
  }

  /** Every node in the default partition (a cluster without node labels). */
  public static NodePartitions none() {
    return new NodePartitions(Collections.<NodeId, String>emptyMap(),
        Collections.<String>emptySet(), Collections.<NodeId, Long>emptyMap());
  }

  /** The node's partition, "" for the default partition (and for a node not known). */
  public String of(NodeId node) {
    String p = of.get(node);
    return p == null ? Partitions.DEFAULT : p;
  }

  /** Whether the cluster has labeled nodes. */
  public boolean labeled() {
    for (String p : of.values()) {
      if (!p.isEmpty()) {
        return true;
      }
    }
    return false;
  }

  /**
   * Whether an app of {@code partition} may be leased GPUs of {@code node}
   * ({@link Partitions#mayUse}, the rule RoundDriver.applyGrants checks every grant by).
   */
  public boolean serves(NodeId node, String partition) {
    return Partitions.mayUse(partition, of(node), nonExclusive);
  }

  /** GPUs of the nodes that serve apps of {@code partition}. */
  public long gpusFor(String partition) {
    long n = 0;
    for (Map.Entry<NodeId, Long> e : totals.entrySet()) {
      if (serves(e.getKey(), partition)) {
        n += e.getValue();
      }
    }
    return n;
  }
}
