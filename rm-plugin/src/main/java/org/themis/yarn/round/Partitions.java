package org.themis.yarn.round;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.hadoop.yarn.api.records.NodeLabel;
import org.apache.hadoop.yarn.server.resourcemanager.nodelabels.RMNodeLabelsManager;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerNode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CSQueue;

/**
 * YARN partitions (node labels) as the engine's cluster view reports them (docs/yarn.md,
 * "Partitions"; the engine runs a round per partition: themis/yarn/partitions.py). Only reads
 * what the RM knows: a node's partition, the cluster's labels and their exclusivity (the
 * RMNodeLabelsManager), a queue's accessible labels. "" is the default partition.
 */
final class Partitions {
  /** The default partition: nodes without a label, asks naming none. */
  static final String DEFAULT = "";

  private Partitions() {}

  /** The node's partition (its node label), "" for the default partition. */
  static String of(SchedulerNode n) {
    String p = n == null ? null : n.getPartition();
    return p == null ? DEFAULT : p;
  }

  /** A node-label expression as a partition name (null and blanks: the default partition). */
  static String ofExpression(String expression) {
    return expression == null ? DEFAULT : expression.trim();
  }

  /**
   * Whether an app of partition {@code app} may be leased GPUs of a node in partition
   * {@code node} (YARN's definition; docs/yarn.md, "Partitions"): its own partition, or the
   * idle resources of a non-exclusive partition when the app is in the default partition.
   * {@code nonExclusive}: the cluster's non-exclusive labels; a label it does not list counts
   * as exclusive (YARN's default).
   */
  static boolean mayUse(String app, String node, Set<String> nonExclusive) {
    return node.equals(app) || app.isEmpty() && nonExclusive.contains(node);
  }

  /** The names of the non-exclusive labels among {@code labels} (those that lend). */
  static Set<String> nonExclusive(List<NodeLabel> labels) {
    Set<String> out = new TreeSet<String>();
    for (NodeLabel l : labels) {
      if (!l.isExclusive()) {
        out.add(l.getName());
      }
    }
    return out;
  }

  /** The cluster's node labels (name and exclusivity), by name; empty without node labels. */
  static List<NodeLabel> clusterLabels(RMNodeLabelsManager labels) {
    if (labels == null) {
      return Collections.emptyList();
    }
    List<NodeLabel> out = new ArrayList<NodeLabel>(labels.getClusterNodeLabels());
    Collections.sort(out, (a, b) -> a.getName().compareTo(b.getName()));
    return out;
  }

  /** Adds {@code "partitions": [{"partition", "exclusive"}]} for the cluster's labels. */
  static void put(ObjectNode view, List<NodeLabel> labels) {
    ArrayNode out = view.putArray("partitions");
    for (NodeLabel l : labels) {
      ObjectNode o = out.addObject();
      o.put("partition", l.getName());
      o.put("exclusive", l.isExclusive());
    }
  }

  /**
   * Adds {@code "accessible_partitions"}: the labels the queue may access ("*": any), sorted;
   * nothing when the queue is not known.
   */
  static void putAccessible(ObjectNode app, CSQueue queue) {
    if (queue == null) {
      return;
    }
    Set<String> access = queue.getAccessibleNodeLabels();
    ArrayNode out = app.putArray("accessible_partitions");
    for (String l : new TreeSet<String>(access == null ? Collections.<String>emptySet()
        : access)) {
      if (!l.isEmpty()) {
        out.add(l);
      }
    }
  }
}
