package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;

/** Assertions on the agents' endpoint's JSON replies, shared by the AMRMToken tests. */
final class AgentReplies {
  private static final ObjectMapper JSON = new ObjectMapper();

  private AgentReplies() {}

  static Token<AMRMTokenIdentifier> decode(String urlString) throws IOException {
    Token<AMRMTokenIdentifier> t = new Token<>();
    t.decodeFromUrlString(urlString);
    return t;
  }

  static void assertOk(String reply) throws IOException {
    JsonNode r = JSON.readTree(reply);
    assertTrue(r.path("ok").asBoolean(false), reply);
  }

  static void assertRefused(String reply, String why) throws IOException {
    JsonNode r = JSON.readTree(reply);
    assertTrue(!r.path("ok").asBoolean(true) && r.path("error").asText("").contains(why),
        "expected a refusal naming '" + why + "': " + reply);
  }
}
