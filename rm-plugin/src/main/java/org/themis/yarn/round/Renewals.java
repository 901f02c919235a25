package org.themis.yarn.round;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.BiFunction;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.themis.yarn.lease.Lease;

/**
 * The leases one round offers for renewal in place (docs/yarn.md, "Renewal in place"), as
 * {@link ClusterView} found them: their GPUs are offered beside the free ones, and per app and
 * node the GPU containers that run on them are what the app asks to keep. The paper's rounds
 * happen at lease expiry and a GPU may go back to its holder (section 3.3.2); YARN cannot hand
 * a running container's GPUs over, so the round runs shortly before the leases end.
 */
public final class Renewals {
  static final Renewals NONE = new Renewals(Collections.<Lease>emptyList(),
      Collections.<Lease>emptyList(), (a, n) -> Collections.<Long>emptyList(), 0L);

  private final List<Lease> due;
  private final Set<Long> ids = new HashSet<>();
  /** app -> node -> its leases offered for renewal there. */
  private final Map<ApplicationId, Map<NodeId, List<Lease>>> byApp = new HashMap<>();
  /** app -> node -> GPUs of each container it keeps running there if renewed. */
  private final Map<ApplicationId, Map<NodeId, List<Long>>> containers = new HashMap<>();

  /**
   * {@code due}: the leases offered for renewal; {@code all}: every lease of the table;
   * {@code gpuContainers}: an app's GPU containers on a node (GPUs each, newest first).
   */
  Renewals(List<Lease> due, List<Lease> all,
      BiFunction<ApplicationId, NodeId, List<Long>> gpuContainers, long now) {
    this.due = due;
    for (Lease l : due) {
      ids.add(l.id());
      byApp.computeIfAbsent(l.app(), k -> new TreeMap<>())
          .computeIfAbsent(l.node(), k -> new ArrayList<>()).add(l);
    }
    // GPUs of the renewing apps' other live leases per node: they keep their containers
    Map<ApplicationId, Map<NodeId, Long>> otherLive = new HashMap<>();
    for (Lease l : all) {
      if (byApp.containsKey(l.app()) && l.isLive(now) && !ids.contains(l.id())) {
        otherLive.computeIfAbsent(l.app(), k -> new HashMap<>())
            .merge(l.node(), (long) l.gpus(), Long::sum);
      }
    }
    for (Map.Entry<ApplicationId, Map<NodeId, List<Lease>>> a : byApp.entrySet()) {
      for (Map.Entry<NodeId, List<Lease>> n : a.getValue().entrySet()) {
        long renewing = 0;
        for (Lease l : n.getValue()) {
          renewing += l.gpus();
        }
        long others = otherLive.getOrDefault(a.getKey(), Collections.emptyMap())
            .getOrDefault(n.getKey(), 0L);
        List<Long> sizes = gpuContainers.apply(a.getKey(), n.getKey());
        long used = 0;
        for (long g : sizes) {
          used += g;
        }
        long cover = Math.min(renewing, used - others);
        List<Long> kept = new ArrayList<>();
        for (long g : sizes) { // newest first, as the enforcer would preempt them
          if (cover <= 0) {
            break;
          }
          kept.add(g);
          cover -= g;
        }
        containers.computeIfAbsent(a.getKey(), k -> new TreeMap<>()).put(n.getKey(), kept);
      }
    }
  }

  /** The leases offered for renewal. */
  public List<Lease> leases() {
    return due;
  }

  boolean contains(Lease l) {
    return ids.contains(l.id());
  }

  /** GPUs of the leases offered for renewal. */
  long gpus() {
    long sum = 0;
    for (Lease l : due) {
      sum += l.gpus();
    }
    return sum;
  }

  /** GPUs of the containers the app keeps running if its leases are renewed. */
  long askedGpus(ApplicationId app) {
    long sum = 0;
    for (List<Long> sizes : containers.getOrDefault(app, Collections.emptyMap()).values()) {
      for (long g : sizes) {
        sum += g;
      }
    }
    return sum;
  }

  /** GPUs offered for renewal on each node. */
  public Map<NodeId, Long> gpusPerNode() {
    Map<NodeId, Long> out = new HashMap<>();
    for (Lease l : due) {
      out.merge(l.node(), (long) l.gpus(), Long::sum);
    }
    return out;
  }

  /** The app's leases offered for renewal on the node (soonest expiry first). */
  public List<Lease> of(ApplicationId app, NodeId node) {
    List<Lease> out = new ArrayList<>(
        byApp.getOrDefault(app, Collections.emptyMap()).getOrDefault(node,
            Collections.emptyList()));
    out.sort((a, b) -> Long.compare(a.expiryMs(), b.expiryMs()));
    return out;
  }

  /**
   * Puts {@code "renewing": {node: {"gpus": g, "containers": [k, ...]}}} into the app's entry
   * of the view when it has leases offered for renewal: their GPUs on each node and the GPUs
   * of each container running on them.
   */
  void put(ObjectNode app, ApplicationId id) {
    Map<NodeId, List<Lease>> mine = byApp.get(id);
    if (mine == null) {
      return;
    }
    ObjectNode out = app.putObject("renewing");
    for (Map.Entry<NodeId, List<Lease>> n : mine.entrySet()) {
      long g = 0;
      for (Lease l : n.getValue()) {
        g += l.gpus();
      }
      ObjectNode o = out.putObject(n.getKey().toString());
      o.put("gpus", g);
      ArrayNode sizes = o.putArray("containers");
      for (long k : containers.get(id).get(n.getKey())) {
        sizes.add(k);
      }
    }
  }
}
