package org.themis.yarn.round;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Map;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.Queue;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerApplication;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.AbstractCSQueue;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CSQueue;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerApp;
import org.themis.yarn.Gpus;
import org.themis.yarn.ThemisCapacityScheduler;

/**
 * The CapacityScheduler leaf queues' GPU entitlements in the engine's cluster view
 * (docs/yarn.md, "Queues"; the engine shares each round's free GPUs between queues with them:
 * themis/yarn/queues.py). For a queue configured in percentages (or weights), the guaranteed
 * GPUs are {@code floor(absolute capacity x cluster GPUs)} and the maximum
 * {@code floor(absolute maximum capacity x cluster GPUs)}; for a queue configured in absolute
 * resources ({@code [memory=...,vcores=...,yarn.io/gpu=n]}), the GPU part of its effective
 * minimum and maximum resources. The default partition only (node labels are not considered).
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

  /** Adds {@code "queues": [{"queue", "guaranteed_gpus", "max_gpus"}]} for {@code queues}. */
  static void put(ObjectNode view, Map<String, CSQueue> queues, long clusterGpus) {
    ArrayNode out = view.putArray("queues");
    for (Map.Entry<String, CSQueue> e : queues.entrySet()) {
      long[] gpus = entitlement(e.getValue(), clusterGpus);
      ObjectNode o = out.addObject();
      o.put("queue", e.getKey());
      o.put("guaranteed_gpus", gpus[0]);
      o.put("max_gpus", gpus[1]);
    }
  }

  /** {guaranteed, maximum} GPUs of the queue on a cluster of {@code clusterGpus} GPUs. */
  static long[] entitlement(CSQueue q, long clusterGpus) {
    long min;
    long max;
    if (q.getCapacityConfigType() == AbstractCSQueue.CapacityConfigType.ABSOLUTE_RESOURCE) {
      min = Gpus.of(q.getQueueResourceQuotas().getEffectiveMinResource());
      max = Gpus.of(q.getQueueResourceQuotas().getEffectiveMaxResource());
    } else {
      min = share(q.getAbsoluteCapacity(), clusterGpus);
      max = share(q.getAbsoluteMaximumCapacity(), clusterGpus);
    }
    max = Math.max(0, Math.min(max, clusterGpus));
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
