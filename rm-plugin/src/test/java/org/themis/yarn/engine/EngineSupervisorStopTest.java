package org.themis.yarn.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Optional;
import org.apache.hadoop.conf.Configuration;
import org.junit.jupiter.api.Test;
import org.themis.yarn.ThemisMiniCluster;
import org.themis.yarn.ThemisSettings;

/**
 * An RM that goes standby (or stops) while its round driver is starting the engine must leave
 * no engine process behind: such an orphan would serve an agents' endpoint on a standby RM.
 * The "engine" here is {@code sleep 120}, a real child process that never registers, so the
 * supervisor is caught in its start-up wait.
 */
class EngineSupervisorStopTest {
  private static final EngineSupervisor.AgentEvents NO_EVENTS = new EngineSupervisor.AgentEvents() {
    @Override public void agentJoined(String appId) { }
    @Override public void agentLeft(String appId) { }
    @Override public String releaseGpus(String appId, String ids) { return "{}"; }
    @Override public String verifyAmToken(String appId, String token) { return "{}"; }
    @Override public String appLeases(String appId) { return "[]"; }
  };

  private static EngineSupervisor supervisor() {
    Configuration c = new Configuration(false);
    c.set(ThemisSettings.PYTHON_EXECUTABLE, "sleep");
    c.set(ThemisSettings.ENGINE_COMMAND, "120");
    c.setLong(ThemisSettings.ENGINE_START_TIMEOUT_MS, 60_000);
    c.setLong(ThemisSettings.ENGINE_RESTART_BACKOFF_MS, 1);
    return new EngineSupervisor(ThemisSettings.from(c), NO_EVENTS);
  }

  @Test
  void stopDuringStartUpKillsTheStartingEngine() throws Exception {
    EngineSupervisor e = supervisor();
    Thread driver = new Thread(e::supervise, "test-round-driver");
    driver.start();
    ThemisMiniCluster.waitFor("the engine process started", 10_000, () -> e.pid() > 0);
    ProcessHandle engine = ProcessHandle.of(e.pid()).orElseThrow(AssertionError::new);
    e.stop(); // not synchronized: it runs while the driver waits for the registration
    driver.join(10_000);
    assertFalse(driver.isAlive(), "the start-up wait did not notice the stop");
    ThemisMiniCluster.waitFor("the starting engine killed", 10_000, () -> !engine.isAlive());
    assertEquals(-1, e.pid());
  }

  @Test
  void nothingStartsAfterStop() {
    EngineSupervisor e = supervisor();
    e.stop();
    e.supervise();
    assertEquals(Optional.empty(), e.health());
    assertEquals(Optional.empty(), e.runRound("{}"));
    assertEquals(0, e.starts(), "an engine was started after stop()");
    assertTrue(e.pid() < 0);
  }
}
