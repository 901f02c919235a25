package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.resourcemanager.ResourceManager;
import org.apache.hadoop.yarn.util.resource.ResourceUtils;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** A real ResourceManager refuses to start on a bad yarn-site.xml value. */
class BadSettingsIT {
  @TempDir
  Path dir;

  @ParameterizedTest
  @CsvSource(delimiter = '|', value = {
      "yarn.resourcemanager.themis.fairness-knob|1.5",
      "yarn.resourcemanager.themis.lease-duration-ms|ten-minutes",
      "yarn.resourcemanager.themis.solver|cplex",
      "yarn.resourcemanager.themis.agent-port|70000",
      "yarn.resourcemanager.themis.agent-tls.enabled|maybe",
      "yarn.resourcemanager.themis.agent-tls.cert-file|/nonexistent/agent.crt",
  })
  void resourceManagerRefusesToStart(String key, String value) throws IOException {
    Path site = dir.resolve("yarn-site.xml");
    Files.writeString(site, "<?xml version=\"1.0\"?>\n<configuration>\n  <property><name>" + key
        + "</name><value>" + value + "</value></property>\n</configuration>\n");
    YarnConfiguration conf = ThemisMiniCluster.baseConf(2);
    conf.unset(ThemisSettings.AGENT_PORT); // set() would win over the file's value
    conf.unset(ThemisSettings.AGENT_TLS_ENABLED); // the default (on): files are checked
    conf.addResource(new org.apache.hadoop.fs.Path(site.toUri()));
    ResourceUtils.resetResourceTypes(conf);
    ResourceManager rm = new ResourceManager();
    Exception e = assertThrows(Exception.class, () -> {
      rm.init(conf);
      rm.start();
    });
    rm.stop();
    StringBuilder all = new StringBuilder();
    for (Throwable t = e; t != null; t = t.getCause()) {
      all.append(t.getMessage()).append('\n');
    }
    assertTrue(all.toString().contains(key) && all.toString().contains("'" + value + "'"),
        "message should name the key and the value:\n" + all);
  }
}
