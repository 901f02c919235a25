package org.themis.yarn;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.ContainerAllocationProposal;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.ResourceCommitRequest;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerApp;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;

/**
 * The two schedulers of the scale benchmark, each counting its committed containers the same
 * way (one counter per kind, GPU commit times per node): the stock CapacityScheduler and
 * ThemisCapacityScheduler, unchanged otherwise.
 */
final class BenchSchedulers {
  private BenchSchedulers() {}

  /** What both schedulers record at commit. */
  static final class Counts {
    final AtomicLong nonGpu = new AtomicLong();
    final AtomicLong gpuContainers = new AtomicLong();
    /** Commit times (ms) of GPU containers per node. */
    final Map<NodeId, ConcurrentLinkedQueue<Long>> gpuCommits = new ConcurrentHashMap<>();

    @SuppressWarnings({"rawtypes", "unchecked"})
    void committed(ResourceCommitRequest r) {
      List<ContainerAllocationProposal<FiCaSchedulerApp, FiCaSchedulerNode>> ps =
          r.getContainersToAllocate();
      if (ps == null) {
        return;
      }
      long now = System.currentTimeMillis();
      for (ContainerAllocationProposal<FiCaSchedulerApp, FiCaSchedulerNode> p : ps) {
        if (Gpus.of(p.getAllocatedOrReservedResource()) > 0) {
          gpuContainers.incrementAndGet();
          gpuCommits.computeIfAbsent(p.getAllocatedOrReservedContainer().getSchedulerNode()
              .getNodeID(), k -> new ConcurrentLinkedQueue<>()).add(now);
        } else {
          nonGpu.incrementAndGet();
        }
      }
    }
  }

  /** The running phase's counters (one RM at a time). */
  static volatile Counts current = new Counts();

  /** Stock CapacityScheduler. */
  public static class Stock extends CapacityScheduler {
    @Override
    @SuppressWarnings("rawtypes")
    public boolean tryCommit(Resource cluster, ResourceCommitRequest r, boolean updatePending) {
      boolean ok = super.tryCommit(cluster, r, updatePending);
      if (ok) {
        current.committed(r);
      }
      return ok;
    }
  }

  /** ThemisCapacityScheduler. */
  public static class Themis extends ThemisCapacityScheduler {
    @Override
    @SuppressWarnings("rawtypes")
    public boolean tryCommit(Resource cluster, ResourceCommitRequest r, boolean updatePending) {
      boolean ok = super.tryCommit(cluster, r, updatePending);
      if (ok) {
        current.committed(r);
      }
      return ok;
    }
  }
}
