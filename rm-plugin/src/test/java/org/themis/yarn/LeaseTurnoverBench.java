package org.themis.yarn;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.junit.jupiter.api.Test;
import org.themis.yarn.lease.Lease;

/**
 * Not part of the test suite (name matches neither *Test nor *IT). Run with
 * {@code mvn -q -o test -pl rm-plugin -Dtest=LeaseTurnoverBench}.
 * 8 NMs x 4 GPUs, 20 apps with endless GPU asks, 4 s leases, no grace: measures the time
 * from a lease's expiry to the first container committed under the next lease on that node.
 * With {@code -Dbench.agents=true} every app also runs a real agent
 * ({@code python -m themis.agent.probe}) on the engine's gRPC endpoint, so rounds go through
 * offers, bids and the partial-allocation auction instead of the leftover path only.
 */
class LeaseTurnoverBench {
  @Test
  void leaseExpiryToNextCommit() throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(4);
    conf.set(ThemisSettings.PYTHON_EXECUTABLE,
        ThemisMiniCluster.testPython());
    conf.setLong(ThemisSettings.LEASE_DURATION_MS, 4000);
    conf.setLong(ThemisSettings.GRACE_PERIOD_MS, 0);
    conf.setLong(ThemisSettings.MONITOR_INTERVAL_MS, 100);
    conf.setLong(ThemisSettings.ROUND_INTERVAL_MS, 100);
    // TestAm has no Themis agent: enforce its leases as a Themis app's (StockAppPolicyIT
    // covers the default, hold)
    conf.set(ThemisSettings.STOCK_APP_POLICY, "preempt");
    long runMs = Long.getLong("bench.ms", 60_000L);
    boolean withAgents = Boolean.getBoolean("bench.agents");
    List<Process> agents = new ArrayList<>();
    List<String> agentOut = Collections.synchronizedList(new ArrayList<>());
    try (ThemisMiniCluster mc = new ThemisMiniCluster("themis-bench", 8, conf)) {
      ThemisCapacityScheduler s = mc.scheduler();
      List<TestAm> apps = new ArrayList<>();
      for (int i = 0; i < 20; i++) {
        apps.add(TestAm.start(mc, "bench-" + i));
      }
      if (withAgents) {
        String address = "";
        for (int i = 0; i < 600 && address.isEmpty(); i++) {
          s.runtime().engine().health(); // starts the engine if it is not up yet
          address = s.runtime().engine().agentAddress();
          Thread.sleep(100);
        }
        for (TestAm am : apps) {
          Process p = new ProcessBuilder(conf.get(ThemisSettings.PYTHON_EXECUTABLE), "-m",
              "themis.agent.probe", "--arbiter", address, "--app-id", am.appId.toString(),
              "--demand", "4", "--iters", "100000", "--until", "never",
              "--timeout-s", Long.toString(runMs / 1000 + 60)).redirectErrorStream(true).start();
          agents.add(p);
          Thread t = new Thread(() -> {
            try (java.io.BufferedReader r = new java.io.BufferedReader(
                new java.io.InputStreamReader(p.getInputStream()))) {
              String line;
              while ((line = r.readLine()) != null) {
                agentOut.add(line);
              }
            } catch (java.io.IOException ignored) {
              // gone
            }
          });
          t.setDaemon(true);
          t.start();
        }
        ThemisMiniCluster.waitFor("20 agents registered", 120_000, () ->
            agentOut.stream().filter(l -> l.contains("\"registered\"")).count() >= 20);
      }
      for (TestAm am : apps) {
        am.ask(100, 1);
        am.poll();
      }
      Map<NodeId, Long> lastExpiry = new HashMap<>();
      Map<Long, Lease> seen = new HashMap<>();
      Map<Long, Long> baseUsed = new HashMap<>();
      Map<Long, Long> pendingFrom = new HashMap<>();
      Set<Long> expiredSeen = new HashSet<>();
      List<Long> samples = new ArrayList<>();
      long end = System.currentTimeMillis() + runMs;
      while (System.currentTimeMillis() < end) {
        long now = System.currentTimeMillis();
        List<Lease> snap = s.leases().snapshot();
        Set<Long> present = new HashSet<>();
        for (Lease l : snap) {
          present.add(l.id());
          if (!seen.containsKey(l.id())) {
            seen.put(l.id(), l);
            baseUsed.put(l.id(), s.usedGpus(l.app(), l.node()));
            Long e = lastExpiry.get(l.node());
            if (e != null) {
              pendingFrom.put(l.id(), e);
            }
          }
        }
        for (Lease l : seen.values()) {
          if (!expiredSeen.contains(l.id()) && now >= l.expiryMs()) {
            expiredSeen.add(l.id());
            lastExpiry.merge(l.node(), l.expiryMs(), Math::max);
          }
        }
        for (Map.Entry<Long, Long> e : new ArrayList<>(pendingFrom.entrySet())) {
          Lease l = seen.get(e.getKey());
          if (s.usedGpus(l.app(), l.node()) > baseUsed.get(l.id()) || !present.contains(l.id())) {
            if (present.contains(l.id())) {
              samples.add(now - e.getValue());
            }
            pendingFrom.remove(e.getKey());
          }
        }
        Thread.sleep(10);
      }
      Collections.sort(samples);
      String out = String.format(
          "lease expiry -> next grant committed: n=%d median=%d ms p95=%d ms max=%d ms "
              + "(rounds=%d, grants=%d, refused=%d, engine starts=%d)",
          samples.size(), pct(samples, 50), pct(samples, 95),
          samples.isEmpty() ? -1 : samples.get(samples.size() - 1),
          s.runtime().driver().rounds(), s.runtime().driver().grantsApplied(), s.runtime().driver().grantsRefused(),
          s.runtime().engine().starts());
      if (withAgents) {
        long offers = agentOut.stream().filter(l -> l.contains("\"event\": \"offer\"")).count();
        long won = agentOut.stream().filter(l -> l.contains("\"was_bidder\": true")
            && !l.contains("\"gpus\": []")).count();
        out += String.format(" [agents: 20 over gRPC, offers=%d, auction wins=%d]", offers, won);
      }
      System.out.println(out);
      Files.writeString(Path.of("target", "bench-lease-turnover.txt"), out + "\n");
    } finally {
      for (Process p : agents) {
        p.destroyForcibly();
      }
    }
  }

  private static long pct(List<Long> sorted, int p) {
    if (sorted.isEmpty()) {
      return -1;
    }
    int i = (int) Math.ceil(p / 100.0 * sorted.size()) - 1;
    return sorted.get(Math.max(0, Math.min(sorted.size() - 1, i)));
  }
}
