package org.themis.yarn.engine;

import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.security.MessageDigest;
import java.util.function.Function;
import org.apache.hadoop.security.token.SecretManager;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;

/**
 * Checks the registration token an application master presents to the agents' endpoint
 * (docs/yarn.md, "Security"): its AMRMToken, which the RM puts into the AM container's
 * credentials and which only the RM and that container hold. The token must be one the RM's
 * {@code AMRMTokenSecretManager} issued (its password is the HMAC of the identifier under a
 * master key of the RM), for the app that registers, and for that app's current attempt while
 * the app runs.
 */
public final class AmTokens {
  /** Characters of an encoded token; longer ones are refused unread. */
  public static final int MAX_TOKEN = 4096;

  private AmTokens() {}

  /**
   * Null if {@code encoded} (Hadoop's URL-safe token encoding) proves the caller is
   * {@code appId}'s AM, else why not. {@code currentAttempt}: the app's current attempt, or
   * null when the RM does not know the app or it has finished.
   */
  public static String check(String appId, String encoded,
      SecretManager<AMRMTokenIdentifier> secrets,
      Function<ApplicationId, ApplicationAttemptId> currentAttempt) {
    if (encoded == null || encoded.isEmpty()) {
      return "missing registration token (the AM's AMRMToken)";
    }
    if (encoded.length() > MAX_TOKEN) {
      return "registration token of " + encoded.length() + " characters (at most " + MAX_TOKEN
          + ")";
    }
    Token<AMRMTokenIdentifier> token = new Token<>();
    AMRMTokenIdentifier id = new AMRMTokenIdentifier();
    try {
      token.decodeFromUrlString(encoded);
      id.readFields(new DataInputStream(new ByteArrayInputStream(token.getIdentifier())));
    } catch (IOException | RuntimeException e) {
      return "registration token is not an encoded AMRMToken";
    }
    if (!AMRMTokenIdentifier.KIND_NAME.equals(token.getKind())
        || id.getApplicationAttemptId() == null) {
      return "registration token is not an AMRMToken (kind " + token.getKind() + ")";
    }
    ApplicationAttemptId attempt = id.getApplicationAttemptId();
    if (!attempt.getApplicationId().toString().equals(appId)) {
      return "registration token of another application";
    }
    // (the RM forgets an attempt's password when it ends: checked first for a clear reason)
    ApplicationAttemptId current = currentAttempt.apply(attempt.getApplicationId());
    if (current == null) {
      return "the application has finished (or the RM does not know it)";
    }
    if (!current.equals(attempt)) {
      return "registration token of attempt " + attempt + ", not of the current attempt "
          + current;
    }
    byte[] expected;
    try {
      expected = secrets.retrievePassword(id);
    } catch (SecretManager.InvalidToken | RuntimeException e) {
      return "wrong registration token";
    }
    if (expected == null || !MessageDigest.isEqual(expected, token.getPassword())) {
      return "wrong registration token";
    }
    return null;
  }
}
