package org.themis.yarn;

/**
 * Implemented by the Python engine process (a Py4J callback object). Kept to strings so the
 * JVM side stays thin: JSON cluster view in, JSON lease grants out.
 */
public interface ThemisEngine {
  /** One auction round. Request: cluster view JSON. Reply: {"grants": [...]} JSON. */
  String runRound(String requestJson);

  /** A short JSON status; used as a liveness probe. */
  String health();

  /**
   * The app's registration with the agents' endpoint ends now (the app finished or its AM
   * attempt ended, e.g. the AM stopped heart-beating): its event stream closes and its secret
   * is forgotten. Returns JSON {@code {"ended": true|false}}.
   */
  String appEnded(String appId);
}
