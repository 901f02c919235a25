package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.hadoop.conf.Configuration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** TLS of the agents' endpoint: on by default, off only when set so; unusable files named. */
class AgentTlsSettingsTest {
  @TempDir
  Path dir;

  private Configuration conf(String... kv) {
    Configuration c = new Configuration(false);
    for (int i = 0; i < kv.length; i += 2) {
      c.set(kv[i], kv[i + 1]);
    }
    return c;
  }

  private String refused(Configuration c) {
    ThemisSettings s = ThemisSettings.from(c);
    return assertThrows(IllegalArgumentException.class, s::checkAgentTlsFiles).getMessage();
  }

  @Test
  void onByDefaultAndNeedsBothFiles() throws Exception {
    ThemisSettings s = ThemisSettings.from(conf());
    assertTrue(s.agentTls());
    String m = refused(conf());
    assertTrue(m.contains(ThemisSettings.AGENT_TLS_CERT) && m.contains("agent-tls.enabled"), m);
    Path cert = Files.writeString(dir.resolve("a.crt"),
        "-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n");
    Path key = Files.writeString(dir.resolve("a.key"),
        "-----BEGIN PRIVATE KEY-----\nMII\n-----END PRIVATE KEY-----\n");
    m = refused(conf(ThemisSettings.AGENT_TLS_CERT, cert.toString()));
    assertTrue(m.contains(ThemisSettings.AGENT_TLS_KEY), m);
    ThemisSettings ok = ThemisSettings.from(conf(ThemisSettings.AGENT_TLS_CERT, cert.toString(),
        ThemisSettings.AGENT_TLS_KEY, key.toString()));
    ok.checkAgentTlsFiles();
    assertEquals(cert.toString(), ok.agentTlsTrust()); // AMs trust the (self-signed) cert
  }

  @Test
  void missingOrNonPemFilesAreNamed() throws Exception {
    Path junk = Files.writeString(dir.resolve("junk.pem"), "hello\n");
    Path key = Files.writeString(dir.resolve("a.key"), "-----BEGIN EC PRIVATE KEY-----\n");
    String m = refused(conf(ThemisSettings.AGENT_TLS_CERT, dir.resolve("nope.crt").toString(),
        ThemisSettings.AGENT_TLS_KEY, key.toString()));
    assertTrue(m.contains(ThemisSettings.AGENT_TLS_CERT) && m.contains("nope.crt")
        && m.contains("no such readable file"), m);
    m = refused(conf(ThemisSettings.AGENT_TLS_CERT, junk.toString(),
        ThemisSettings.AGENT_TLS_KEY, key.toString()));
    assertTrue(m.contains("not a PEM file"), m);
  }

  @Test
  void offOnlyWhenSetSo() {
    ThemisSettings off = ThemisSettings.from(conf(ThemisSettings.AGENT_TLS_ENABLED, "false"));
    assertFalse(off.agentTls());
    off.checkAgentTlsFiles(); // nothing to check
    assertThrows(IllegalArgumentException.class,
        () -> ThemisSettings.from(conf(ThemisSettings.AGENT_TLS_ENABLED, "no")));
  }
}
