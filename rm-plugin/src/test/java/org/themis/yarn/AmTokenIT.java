package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.themis.yarn.AgentReplies.assertOk;
import static org.themis.yarn.AgentReplies.assertRefused;
import static org.themis.yarn.AgentReplies.decode;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.RMApp;
import org.junit.jupiter.api.Test;
import org.themis.yarn.engine.AmTokens;

/**
 * The registration check of the agents' endpoint against a real RM (docs/yarn.md,
 * "Security"): only the running AM's own AMRMToken registers its app; every other token is
 * refused with the reason, and the check changes nothing in the plugin.
 */
class AmTokenIT {
  private static final ObjectMapper JSON = new ObjectMapper();

  @Test
  void onlyTheRunningAmsOwnTokenIsAccepted() throws Exception {
    YarnConfiguration conf = ThemisMiniCluster.baseConf(2);
    conf.setBoolean(ThemisSettings.ENGINE_ENABLED, false); // the check needs no engine
    try (ThemisMiniCluster mc = new ThemisMiniCluster("amtoken", 1, conf)) {
      TestAm a = TestAm.start(mc, "app-a");
      TestAm b = TestAm.start(mc, "app-b");
      ThemisRuntime rt = mc.scheduler().runtime();
      String appA = a.appId.toString();
      String ta = a.amRmToken();
      String tb = b.amRmToken();
      String before = rt.status().getStatusJson();

      assertOk(rt.agents().verifyAmToken(appA, ta));
      assertRefused(rt.agents().verifyAmToken(appA, ""), "missing registration token");
      assertRefused(rt.agents().verifyAmToken(appA, "bm90LWEtdG9rZW4"), "not an encoded AMRMToken");
      assertRefused(rt.agents().verifyAmToken(appA, "x".repeat(AmTokens.MAX_TOKEN + 1)), "at most");
      assertRefused(rt.agents().verifyAmToken(appA, tb), "another application");
      // a's identifier with b's password: not issued by the RM for a
      Token<AMRMTokenIdentifier> mine = decode(ta);
      Token<AMRMTokenIdentifier> forged = new Token<>(mine.getIdentifier(),
          decode(tb).getPassword(), mine.getKind(), mine.getService());
      assertRefused(rt.agents().verifyAmToken(appA, forged.encodeToUrlString()),
          "wrong registration token");
      assertRefused(rt.agents().verifyAmToken("application_1_0001", ta), "another application");
      assertEquals(JSON.readTree(before).path("leases"),
          JSON.readTree(rt.status().getStatusJson()).path("leases"), "a check changed the leases");

      a.finish(); // the app ends: its token no longer registers
      RMApp app = mc.cluster.getResourceManager().getRMContext().getRMApps().get(a.appId);
      ThemisMiniCluster.waitFor(appA + " completed", 30_000, app::isAppInCompletedStates);
      assertRefused(rt.agents().verifyAmToken(appA, ta), "has finished");
      assertOk(rt.agents().verifyAmToken(b.appId.toString(), tb));
      b.finish();
    }
  }
}
