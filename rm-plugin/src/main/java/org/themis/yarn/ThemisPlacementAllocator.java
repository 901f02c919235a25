package org.themis.yarn;

import java.util.Optional;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ResourceRequest;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.ResourceScheduler;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerNode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.activities.DiagnosticsCollector;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.placement.LocalityAppPlacementAllocator;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.SchedulingMode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.PendingAsk;

/**
 * Early filter (yarn.scheduler.app-placement-allocator.class): a GPU ask is not even proposed
 * on a node where the app has no lease room, so a GPU app without a lease does not block the
 * node for the apps behind it (CapacityScheduler stops at the first app that proposes).
 * {@link ThemisCapacityScheduler#tryCommit} stays the authoritative gate.
 */
public class ThemisPlacementAllocator<N extends SchedulerNode>
    extends LocalityAppPlacementAllocator<N> {

  @Override
  public boolean precheckNode(SchedulerNode node, SchedulingMode mode,
      Optional<DiagnosticsCollector> dcOpt) {
    if (!super.precheckNode(node, mode, dcOpt)) {
      return false;
    }
    PendingAsk ask = getPendingAsk(ResourceRequest.ANY);
    long gpus = ask == null ? 0 : Gpus.of(ask.getPerAllocationResource());
    if (gpus <= 0) {
      return true;
    }
    ResourceScheduler s = rmContext == null ? null : rmContext.getScheduler();
    if (!(s instanceof ThemisCapacityScheduler)) {
      return true;
    }
    ThemisCapacityScheduler themis = (ThemisCapacityScheduler) s;
    ApplicationId app = appSchedulingInfo.getApplicationId();
    long live = themis.leases().liveGpus(app, node.getNodeID());
    // most apps hold no lease on most nodes: no need to sum their containers' GPUs there
    long room = live < gpus ? live : live - themis.usedGpus(app, node.getNodeID());
    if (room < gpus) {
      themis.countFilteredGpuAsk();
      return false;
    }
    return true;
  }
}
