package org.themis.yarn.status;

import java.time.Instant;
import java.time.ZoneId;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.server.resourcemanager.RMContext;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.RMApp;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.attempt.RMAppAttempt;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.attempt.RMAppAttemptState;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.themis.yarn.ThemisSettings;
import org.themis.yarn.lease.Lease;
import org.themis.yarn.round.AppGpus;
import org.themis.yarn.round.NodePartitions;

/**
 * Says why an app waits for GPUs, and what holds its GPUs, in YARN's app diagnostics (REST
 * {@code /ws/v1/cluster/apps/<id>} {@code diagnostics}, {@code yarn application -status}),
 * refreshed by the round driver at each pass. The RM log gets one INFO line per app when the
 * reason changes (not every pass). Only apps whose AM has registered (attempt RUNNING) are
 * touched: before that CapacityScheduler's own AM-launch diagnostics are shown. The text goes
 * through {@link RMAppAttempt#updateAMLaunchDiagnostics}, which YARN reports for a running app
 * as long as the attempt has no diagnostics of its own (it clears it when the AM registers, and
 * nothing else sets it while the app runs).
 */
public final class WaitDiagnostics {
  private static final Logger LOG = LoggerFactory.getLogger(WaitDiagnostics.class);
  private static final String PREFIX = "Themis: ";
  private static final DateTimeFormatter HMS =
      DateTimeFormatter.ofPattern("HH:mm:ss").withZone(ZoneId.systemDefault());

  /** What an app is told, and the reason's kind (a change of kind is logged). */
  static final class Reason {
    private final String kind;
    private final String text;

    Reason(String kind, String text) {
      this.kind = kind;
      this.text = text;
    }

    String kind() {
      return kind;
    }

    String text() {
      return text;
    }
  }

  private final ThemisSettings settings;
  private final Map<ApplicationId, Reason> shown = new ConcurrentHashMap<>();

  public WaitDiagnostics(ThemisSettings settings) {
    this.settings = settings;
  }

  /** The last reason shown for each app (for the status view). */
  Map<ApplicationId, Reason> shown() {
    return shown;
  }

  /** A time of day, HH:mm:ss in the RM's time zone, for log lines and diagnostics. */
  public static String time(long ms) {
    return HMS.format(Instant.ofEpochMilli(ms));
  }

  static String gpus(long n) {
    return n + (n == 1 ? " GPU" : " GPUs");
  }

  /** "3 GPUs asked (1 container of 2 GPUs + 1 container of 1 GPU)". */
  static String describeAsks(NavigableMap<Long, Long> asks) {
    List<String> parts = new ArrayList<>();
    long total = 0;
    for (Map.Entry<Long, Long> e : asks.descendingMap().entrySet()) {
      parts.add(e.getValue() + (e.getValue() == 1 ? " container of " : " containers of ")
          + gpus(e.getKey()));
      total += e.getKey() * e.getValue();
    }
    return gpus(total) + " asked (" + String.join(" + ", parts) + ")";
  }

  /**
   * The reason for one app, or null when there is nothing to say (no GPU asked, none held by
   * an app without an agent).
   */
  Reason reason(AppGpus a, long now, Map<NodeId, Long> grantable, long clusterGpus,
      List<Lease> leases) {
    return reason(a, now, grantable, clusterGpus, leases, NodePartitions.none());
  }

  /**
   * As above on a cluster with node labels: only GPUs of nodes that serve the app's partition
   * count as free for it, and the text names a partition other than the default.
   */
  Reason reason(AppGpus a, long now, Map<NodeId, Long> grantable, long clusterGpus,
      List<Lease> leases, NodePartitions parts) {
    List<Lease> mine = new ArrayList<>();
    long nextEnd = Long.MAX_VALUE;
    for (Lease l : leases) {
      if (l.app().equals(a.app()) && l.isLive(now)) {
        mine.add(l);
      }
      if (l.isLive(now)) {
        nextEnd = Math.min(nextEnd, l.expiryMs());
      } else if (l.state() == Lease.State.EXPIRING) {
        nextEnd = Math.min(nextEnd, l.graceDeadlineMs());
      }
    }
    if (a.askedGpus() == 0) {
      return a.agent() || mine.isEmpty() ? null : holding(mine);
    }
    String asked = describeAsks(a.asks());
    String where = "";
    if (parts.labeled()) {
      where = a.partition().isEmpty() ? " in the default partition"
          : " in partition " + a.partition();
      Map<NodeId, Long> usable = new TreeMap<>();
      for (Map.Entry<NodeId, Long> e : grantable.entrySet()) {
        if (parts.serves(e.getKey(), a.partition())) {
          usable.put(e.getKey(), e.getValue());
        }
      }
      grantable = usable;
      clusterGpus = parts.gpusFor(a.partition());
    }
    // lease room: GPUs leased to it on a node and not used by its containers there
    SortedMap<String, Long> room = new TreeMap<>();
    for (Lease l : mine) {
      room.merge(l.node().toString(), (long) l.gpus(), Long::sum);
    }
    for (Map.Entry<NodeId, Long> e : a.running().entrySet()) {
      room.computeIfPresent(e.getKey().toString(), (k, v) -> v - e.getValue());
    }
    room.values().removeIf(v -> v < a.smallestContainer());
    if (!room.isEmpty()) {
      long until = Long.MAX_VALUE;
      for (Lease l : mine) {
        until = Math.min(until, l.expiryMs());
      }
      return new Reason("placing", "Themis: placing its containers: " + asked + ", leased to "
          + "it: " + fmtNodes(room) + " until " + time(until) + "; YARN places them there at the "
          + "nodes' next heartbeats");
    }
    long free = 0;
    long bestNode = 0;
    SortedMap<String, Long> freeByNode = new TreeMap<>();
    for (Map.Entry<NodeId, Long> e : grantable.entrySet()) {
      free += e.getValue();
      bestNode = Math.max(bestNode, e.getValue());
      if (e.getValue() > 0) {
        freeByNode.put(e.getKey().toString(), e.getValue());
      }
    }
    String next = nextEnd == Long.MAX_VALUE ? "next round as soon as GPUs are freed"
        : "next round at lease expiry in " + Math.max(0, (nextEnd - now + 999) / 1000) + " s ("
            + time(nextEnd) + ") or as soon as GPUs are freed";
    String waiting = "Themis: waiting for GPUs" + where + ": ";
    if (free == 0) {
      return new Reason("all-leased", waiting + asked + ", all " + gpus(clusterGpus)
          + (where.isEmpty() ? " of the cluster" : " it may use") + " leased or in use; "
          + next);
    }
    if (bestNode < a.smallestContainer()) {
      return new Reason("no-fit", waiting + asked + "; " + gpus(free)
          + " free but no node has " + a.smallestContainer() + " free for one container ("
          + fmtNodes(freeByNode) + "); " + next);
    }
    return new Reason("next-round", waiting + asked + "; " + gpus(free)
        + " free (" + fmtNodes(freeByNode) + "), offered in the next round (within "
        + settings.roundIntervalMs() + " ms)");
  }

  private Reason holding(List<Lease> mine) {
    SortedMap<String, Long> byNode = new TreeMap<>();
    long until = Long.MAX_VALUE;
    long holdEnd = Long.MAX_VALUE;
    for (Lease l : mine) {
      byNode.merge(l.node().toString(), (long) l.gpus(), Long::sum);
      until = Math.min(until, l.expiryMs());
      holdEnd = Math.min(holdEnd, l.grantedAtMs() + settings.stockAppMaxHoldMs());
    }
    String policy = settings.stockAppPolicy() == ThemisSettings.StockAppPolicy.HOLD
        ? "its leases renew while its containers run, until " + time(holdEnd) + " at the latest ("
            + ThemisSettings.STOCK_APP_MAX_HOLD_MS + "); then its containers are preempted"
        : "its containers are preempted at lease expiry (" + ThemisSettings.STOCK_APP_POLICY
            + "=preempt)";
    return new Reason("holding", "Themis: holds " + fmtNodes(byNode) + " until " + time(until)
        + "; app without a Themis agent: " + policy);
  }

  private static String fmtNodes(SortedMap<String, Long> gpus) {
    List<String> out = new ArrayList<>();
    for (Map.Entry<String, Long> e : gpus.entrySet()) {
      out.add(gpus(e.getValue()) + " on " + e.getKey());
    }
    return String.join(", ", out);
  }

  /** Shows each app its reason (clearing ours where there is none now); logs changes. */
  public void update(RMContext rm, List<AppGpus> apps, long now, Map<NodeId, Long> grantable,
      long clusterGpus, List<Lease> leases, NodePartitions parts) {
    Map<ApplicationId, Reason> current = new java.util.HashMap<>();
    for (AppGpus a : apps) {
      Reason r = reason(a, now, grantable, clusterGpus, leases, parts);
      if (r != null) {
        current.put(a.app(), r);
      }
    }
    for (ApplicationId app : new ArrayList<>(shown.keySet())) {
      if (!current.containsKey(app)) {
        Reason old = shown.remove(app);
        RMAppAttempt at = runningAttempt(rm, app);
        if (at != null) {
          at.updateAMLaunchDiagnostics(null);
          LOG.info("Themis: {} no longer waits for or holds GPUs (was: {})", app, old.kind());
        }
      }
    }
    for (Map.Entry<ApplicationId, Reason> e : current.entrySet()) {
      RMAppAttempt at = runningAttempt(rm, e.getKey());
      if (at == null) {
        continue;
      }
      at.updateAMLaunchDiagnostics(e.getValue().text());
      Reason old = shown.put(e.getKey(), e.getValue());
      if (old == null || !old.kind().equals(e.getValue().kind())) {
        // "Themis: <app> waiting for GPUs: ...", once per change of reason
        LOG.info("Themis: {} {}", e.getKey(), e.getValue().text().substring(PREFIX.length()));
      }
    }
  }

  private static RMAppAttempt runningAttempt(RMContext rm, ApplicationId app) {
    RMApp a = rm.getRMApps().get(app);
    RMAppAttempt at = a == null ? null : a.getCurrentAppAttempt();
    return at != null && at.getAppAttemptState() == RMAppAttemptState.RUNNING ? at : null;
  }
}
