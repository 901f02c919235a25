package org.themis.yarn.round;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeLabel;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.Queue;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerApplication;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.AbstractCSQueue;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CSQueue;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.QueueCapacities;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerApp;
import org.themis.yarn.Gpus;
import org.themis.yarn.ThemisCapacityScheduler;

/**
 * The CapacityScheduler leaf queues' GPU entitlements in the engine's cluster view
 * (docs/yarn.md, "Queues"; the engine shares each round's free GPUs between queues with them:
 * themis/yarn/queues.py), per partition (docs/yarn.md, "Partitions"). For a queue configured
 * in percentages (or weights), the guaranteed GPUs in a partition are
 * {@code floor(absolute capacity there x the partition's GPUs)} and the maximum
 * {@code floor(absolute maximum capacity there x the partition's GPUs)} (the per-label
 * {@code capacity} and {@code maximum-capacity}; nothing in a label the queue has none of);
 * for a queue configured in absolute resources ({@code [memory=...,vcores=...,yarn.io/gpu=n]}),
 * the GPU part of its effective minimum and maximum resources in the partition.
 */
final class QueueGpus {
  private QueueGpus() {}

  /**
   * The app's leaf queue path ("root.a"), null when its queue is not a CapacityScheduler queue;
   * the queue is added to {@code seen} (path -> queue).
   */
  static String queueOf(ThemisCapacityScheduler scheduler, ApplicationId app,
      Map<String, CSQueue> seen) {
    SchedulerApplication<FiCaSchedulerApp> sa = scheduler.getSchedulerApplications().get(app);
    Queue q = sa == null ? null : sa.getQueue();
    if (!(q instanceof CSQueue)) {
      return null;
    }
    CSQueue cs = (CSQueue) q;
    String path = cs.getQueuePath();
    seen.put(path, cs);
    return path;
  }

  /**
   * Adds {@code "queues": [{"queue", "guaranteed_gpus", "max_gpus", "partitions"}]} for
   * {@code queues}: the default partition's entitlement, and with node labels
   * {@code "partitions": {label: {"guaranteed_gpus", "max_gpus"}}} for every label of the
   * cluster. {@code partitionGpus}: partition -> GPUs of its nodes.
   */
  static void put(ObjectNode view, Map<String, CSQueue> queues, Map<String, Long> partitionGpus,
      List<NodeLabel> labels) {
    ArrayNode out = view.putArray("queues");
    for (Map.Entry<String, CSQueue> e : queues.entrySet()) {
      ObjectNode o = out.addObject();
      o.put("queue", e.getKey());
      put(o, entitlement(e.getValue(), Partitions.DEFAULT, gpus(partitionGpus,
          Partitions.DEFAULT)));
      if (!labels.isEmpty()) {
        ObjectNode per = o.putObject("partitions");
        for (NodeLabel l : labels) {
          put(per.putObject(l.getName()),
              entitlement(e.getValue(), l.getName(), gpus(partitionGpus, l.getName())));
        }
      }
    }
  }

  private static void put(ObjectNode o, long[] gpus) {
    o.put("guaranteed_gpus", gpus[0]);
    o.put("max_gpus", gpus[1]);
  }

  private static long gpus(Map<String, Long> partitionGpus, String partition) {
    Long g = partitionGpus.get(partition);
    return g == null ? 0 : g;
  }

  /** {guaranteed, maximum} GPUs of the queue in {@code partition}, which has {@code gpus}. */
  static long[] entitlement(CSQueue q, String partition, long gpus) {
    long min;
    long max;
    if (q.getCapacityConfigType() == AbstractCSQueue.CapacityConfigType.ABSOLUTE_RESOURCE) {
      min = Gpus.of(q.getQueueResourceQuotas().getEffectiveMinResource(partition));
      max = Gpus.of(q.getQueueResourceQuotas().getEffectiveMaxResource(partition));
    } else {
      QueueCapacities c = q.getQueueCapacities();
      min = share(c.getAbsoluteCapacity(partition), gpus);
      max = share(c.getAbsoluteMaximumCapacity(partition), gpus);
    }
    max = Math.max(0, Math.min(max, gpus));
    return new long[] {Math.max(0, Math.min(min, max)), max};
  }

  /**
   * {@code floor(fraction x gpus)}, the float fraction first rounded to 6 decimals: 70% is the
   * float 0.69999999, which would otherwise give 6 of 10 GPUs instead of 7.
   */
  static long share(float fraction, long gpus) {
    double f = Math.round((double) fraction * 1e6) / 1e6;
    return (long) Math.floor(f * gpus + 1e-9);
  }
}
