package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.hadoop.conf.Configuration;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.api.Test;

class ThemisSettingsTest {
  @Test
  void defaults() {
    ThemisSettings s = ThemisSettings.from(new Configuration(false));
    assertEquals(0.8, s.fairnessKnob());
    assertEquals(600_000L, s.leaseDurationMs());
    assertEquals(30_000L, s.gracePeriodMs());
    assertEquals("auto-fast", s.solver());
    assertEquals("exact", s.idealTime());
    assertEquals("ranked", s.starvation());
    assertEquals("python3", s.pythonExecutable());
    assertEquals("-m themis.yarn.engine", s.engineCommand());
    assertEquals(8642, s.agentPort());
    assertEquals(1_000L, s.restartBackoffMs());
    assertTrue(s.engineEnabled());
    assertEquals(ThemisSettings.StockAppPolicy.HOLD, s.stockAppPolicy());
    assertEquals(3_600_000L, s.stockAppMaxHoldMs());
    assertEquals(10, s.metricsTopApps());
    assertEquals(4096, s.maxApps());
  }

  @Test
  void goodValuesAreRead() {
    Configuration c = new Configuration(false);
    c.set(ThemisSettings.FAIRNESS_KNOB, "0");
    c.set(ThemisSettings.SOLVER, " HiGHS ");
    c.set(ThemisSettings.IDEAL_TIME, " Paper ");
    c.set(ThemisSettings.STARVATION, " Inf ");
    c.set(ThemisSettings.AGENT_PORT, "0");
    c.set(ThemisSettings.GRACE_PERIOD_MS, "0");
    c.set(ThemisSettings.ENGINE_ENABLED, "false");
    c.set(ThemisSettings.STOCK_APP_POLICY, " Preempt ");
    c.set(ThemisSettings.STOCK_APP_MAX_HOLD_MS, "60000");
    c.set(ThemisSettings.METRICS_TOP_APPS, "0");
    c.set(ThemisSettings.MAX_APPS, " 1000000 ");
    ThemisSettings s = ThemisSettings.from(c);
    assertEquals(0.0, s.fairnessKnob());
    assertEquals("highs", s.solver());
    assertEquals("paper", s.idealTime());
    assertEquals("inf", s.starvation());
    assertEquals(0, s.agentPort());
    assertEquals(0L, s.gracePeriodMs());
    assertFalse(s.engineEnabled());
    assertEquals(ThemisSettings.StockAppPolicy.PREEMPT, s.stockAppPolicy());
    assertEquals(60_000L, s.stockAppMaxHoldMs());
    assertEquals(0, s.metricsTopApps());
    assertEquals(1_000_000, s.maxApps());
  }

  /** Every order of starving apps is read as set: served-now, ranked (the default), inf. */
  @ParameterizedTest
  @CsvSource(delimiter = '|', value = {"served-now|served-now", "' Served-Now '|served-now",
      "inf|inf", "INF|inf", "Ranked|ranked"})
  void starvationIsReadAsSet(String value, String expected) {
    assertEquals(expected, ThemisSettings.from(conf(ThemisSettings.STARVATION, value))
        .starvation());
  }

  @ParameterizedTest
  @CsvSource(delimiter = '|', value = {
      "yarn.resourcemanager.themis.fairness-knob|1.0",
      "yarn.resourcemanager.themis.fairness-knob|-0.1",
      "yarn.resourcemanager.themis.fairness-knob|NaN",
      "yarn.resourcemanager.themis.fairness-knob|high",
      "yarn.resourcemanager.themis.lease-duration-ms|0",
      "yarn.resourcemanager.themis.lease-duration-ms|10m",
      "yarn.resourcemanager.themis.lease-duration-ms|31622400001",
      "yarn.resourcemanager.themis.grace-period-ms|-1",
      "yarn.resourcemanager.themis.solver|cplex",
      "yarn.resourcemanager.themis.ideal-time|gavel",
      "yarn.resourcemanager.themis.starvation|served",
      "yarn.resourcemanager.themis.starvation|'  '",
      "yarn.resourcemanager.themis.stock-app.policy|renew",
      "yarn.resourcemanager.themis.stock-app.max-hold-ms|0",
      "yarn.resourcemanager.themis.python-executable|'  '",
      "yarn.resourcemanager.themis.engine-command|'  '",
      "yarn.resourcemanager.themis.agent-port|65536",
      "yarn.resourcemanager.themis.agent-port|-1",
      "yarn.resourcemanager.themis.engine-restart-backoff-ms|0",
      "yarn.resourcemanager.themis.round-timeout-ms|x",
      "yarn.resourcemanager.themis.engine-enabled|yes",
      "yarn.resourcemanager.themis.metrics.top-apps|-1",
      "yarn.resourcemanager.themis.metrics.top-apps|1001",
      "yarn.resourcemanager.themis.agent-bind-host|rm:8642",
      "yarn.resourcemanager.themis.agent-bind-host|'a b'",
      "yarn.resourcemanager.themis.agent-address|rm",
      "yarn.resourcemanager.themis.agent-address|http://rm:8642",
      "yarn.resourcemanager.themis.max-apps|0",
      "yarn.resourcemanager.themis.max-apps|1000001",
      "yarn.resourcemanager.themis.max-apps|many",
  })
  void badValueNamesKeyAndValue(String key, String value) {
    Configuration c = new Configuration(false);
    c.set(key, value);
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> ThemisSettings.from(c));
    assertTrue(e.getMessage().contains(key), e.getMessage());
    assertTrue(e.getMessage().contains("'" + value + "'"), e.getMessage());
  }

  /** The names and limits the engine accepts come from EngineDefaults (generated). */
  @Test
  void refusalsListWhatTheEngineAccepts() {
    assertEquals("Themis: invalid value 'cplex' for " + ThemisSettings.SOLVER + ": must be one of "
        + String.join(", ", EngineDefaults.SOLVERS), refusal(ThemisSettings.SOLVER, "cplex"));
    assertEquals("Themis: invalid value 'gavel' for " + ThemisSettings.IDEAL_TIME
        + ": must be exact or paper", refusal(ThemisSettings.IDEAL_TIME, "gavel"));
    assertEquals("Themis: invalid value 'served' for " + ThemisSettings.STARVATION
        + ": must be inf, served-now or ranked", refusal(ThemisSettings.STARVATION, "served"));
    String tooLong = Long.toString(EngineDefaults.MAX_LEASE_DURATION_MS + 1);
    assertEquals("Themis: invalid value '" + tooLong + "' for " + ThemisSettings.LEASE_DURATION_MS
        + ": must be <= " + EngineDefaults.MAX_LEASE_DURATION_MS,
        refusal(ThemisSettings.LEASE_DURATION_MS, tooLong));
    assertEquals(EngineDefaults.MAX_LEASE_DURATION_MS, ThemisSettings.from(conf(
        ThemisSettings.LEASE_DURATION_MS, Long.toString(EngineDefaults.MAX_LEASE_DURATION_MS)))
        .leaseDurationMs());
  }

  private static Configuration conf(String key, String value) {
    Configuration c = new Configuration(false);
    c.set(key, value);
    return c;
  }

  private static String refusal(String key, String value) {
    return assertThrows(IllegalArgumentException.class,
        () -> ThemisSettings.from(conf(key, value))).getMessage();
  }

  @Test
  void agentEndpointBindsWhereTheRmsOwnServersDo() {
    Configuration c = new Configuration(false);
    ThemisSettings s = ThemisSettings.from(c);
    assertEquals("0.0.0.0", s.agentBindHost());  // yarn-default's RM hostname
    assertFalse(s.agentBindHostSet());
    c.set("yarn.resourcemanager.hostname", "rm");
    assertEquals("rm", ThemisSettings.from(c).agentBindHost());
    c.set("yarn.resourcemanager.bind-host", "0.0.0.0");
    assertEquals("0.0.0.0", ThemisSettings.from(c).agentBindHost());
    c.set(ThemisSettings.AGENT_BIND_HOST, " 172.31.0.4 ");
    s = ThemisSettings.from(c);
    assertEquals("172.31.0.4", s.agentBindHost());
    assertTrue(s.agentBindHostSet());
    c.set(ThemisSettings.AGENT_BIND_HOST, "::");
    assertEquals("::", ThemisSettings.from(c).agentBindHost());
    c.set(ThemisSettings.AGENT_ADDRESS, "rm.example.com:8642");
    assertEquals("rm.example.com:8642", ThemisSettings.from(c).agentAddress());
  }

  @Test
  void leaseLengthsStayWithinTheSpread() {
    Configuration c = new Configuration(false);
    c.set(ThemisSettings.LEASE_DURATION_MS, "60000");
    ThemisSettings s = ThemisSettings.from(c);
    assertEquals(30_000L, s.leaseSpreadMs());  // by default half of the lease
    assertEquals(52_000L, s.leaseLengthMs(52_000L));
    assertEquals(45_000L, s.leaseLengthMs(1L));  // the engine's length kept in 60 s +- 15 s
    assertEquals(75_000L, s.leaseLengthMs(Long.MAX_VALUE));
    c.set(ThemisSettings.LEASE_SPREAD_MS, "0");
    assertEquals(60_000L, ThemisSettings.from(c).leaseLengthMs(75_000L));
    c.set(ThemisSettings.LEASE_SPREAD_MS, "60001");
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> ThemisSettings.from(c));
    assertTrue(e.getMessage().contains(ThemisSettings.LEASE_SPREAD_MS), e.getMessage());
    assertTrue(e.getMessage().contains("must be <= " + ThemisSettings.LEASE_DURATION_MS),
        e.getMessage());
  }

  @Test
  void backoffMaxBelowBaseIsRefused() {
    Configuration c = new Configuration(false);
    c.set(ThemisSettings.ENGINE_RESTART_BACKOFF_MS, "5000");
    c.set(ThemisSettings.ENGINE_RESTART_BACKOFF_MAX_MS, "100");
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> ThemisSettings.from(c));
    assertTrue(e.getMessage().contains(ThemisSettings.ENGINE_RESTART_BACKOFF_MAX_MS));
  }

  @Test
  void withRmHaThisRmsOwnAgentKeysComeFirst() {
    Configuration c = new Configuration(false);
    c.set(ThemisSettings.AGENT_PORT, "8642");
    c.set(ThemisSettings.AGENT_PORT + ".rm2", "8643");
    c.set(ThemisSettings.AGENT_ADDRESS + ".rm2", "proxy-b:9000");
    c.set("yarn.resourcemanager.ha.id", "rm2");
    // HA off: the per-RM keys are not read
    assertEquals(8642, ThemisSettings.from(c).agentPort());
    c.set("yarn.resourcemanager.ha.enabled", "true");
    ThemisSettings s = ThemisSettings.from(c);
    assertEquals(8643, s.agentPort());
    assertEquals("proxy-b:9000", s.agentAddress());
    // another RM id without keys of its own: the shared ones
    c.set("yarn.resourcemanager.ha.id", "rm1");
    assertEquals(8642, ThemisSettings.from(c).agentPort());
    assertEquals("", ThemisSettings.from(c).agentAddress());
    // a bad per-RM value names its own key
    c.set("yarn.resourcemanager.ha.id", "rm2");
    c.set(ThemisSettings.AGENT_PORT + ".rm2", "70000");
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> ThemisSettings.from(c));
    assertTrue(e.getMessage().contains(ThemisSettings.AGENT_PORT + ".rm2"), e.getMessage());
  }
}
