package org.themis.docker;

import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.net.CachedDNSToSwitchMapping;
import org.apache.hadoop.net.NetworkTopology;

/**
 * Rack mapping by host name as given, for the mini-cluster, whose NodeManagers are hosts nm1,
 * nm2, ... on its Docker network (the table lists each by name and by address).
 *
 * <p>Hadoop's TableMapping/ScriptBasedMapping normalise host names to IP addresses before the
 * lookup (CachedDNSToSwitchMapping.resolve calls NetUtils.normalizeHostNames), so a table
 * keyed by names (or a host that resolves differently in the RM) would miss. YARN's
 * RackResolver wraps any mapping
 * that is not a CachedDNSToSwitchMapping in one, so this class extends it and overrides
 * {@link #resolve(List)} to look names up as given (also "host:port", then the bare host).
 *
 * <p>Configuration: {@code net.topology.node.switch.mapping.impl=org.themis.docker.HostnameTableMapping}
 * and {@code net.topology.table.file.name=/path/to/topology.table} (lines "host rack", '#' comments).
 * Unknown hosts go to {@link NetworkTopology#DEFAULT_RACK}.
 */
public class HostnameTableMapping extends CachedDNSToSwitchMapping {
  public static final String TABLE_KEY = "net.topology.table.file.name";
  private volatile Map<String, String> table;

  public HostnameTableMapping() {
    super(null);
  }

  @Override
  public void setConf(Configuration conf) {
    super.setConf(conf);
    table = null;
  }

  private Map<String, String> table() {
    Map<String, String> t = table;
    if (t == null) {
      t = load();
      table = t;
    }
    return t;
  }

  private Map<String, String> load() {
    Map<String, String> t = new HashMap<>();
    Configuration conf = getConf();
    String file = conf == null ? null : conf.getTrimmed(TABLE_KEY);
    if (file == null || file.isEmpty()) {
      return t;
    }
    try (BufferedReader r = Files.newBufferedReader(Paths.get(file), StandardCharsets.UTF_8)) {
      String line;
      while ((line = r.readLine()) != null) {
        int hash = line.indexOf('#');
        if (hash >= 0) {
          line = line.substring(0, hash);
        }
        String[] cols = line.trim().split("\\s+");
        if (cols.length >= 2) {
          t.put(cols[0], cols[1]);
        }
      }
    } catch (IOException e) {
      throw new IllegalStateException("cannot read rack table " + file, e);
    }
    return t;
  }

  @Override
  public List<String> resolve(List<String> names) {
    Map<String, String> t = table();
    List<String> out = new ArrayList<>(names.size());
    for (String n : names) {
      String rack = t.get(n);
      if (rack == null && n != null && n.indexOf(':') > 0) {
        rack = t.get(n.substring(0, n.lastIndexOf(':')));
      }
      out.add(rack != null ? rack : NetworkTopology.DEFAULT_RACK);
    }
    return out;
  }

  @Override
  public Map<String, String> getSwitchMap() {
    return new HashMap<>(table());
  }

  @Override
  public boolean isSingleSwitch() {
    return false;
  }

  @Override
  public void reloadCachedMappings() {
    table = null;
  }

  @Override
  public void reloadCachedMappings(List<String> names) {
    table = null;
  }

  @Override
  public String toString() {
    return "HostnameTableMapping" + table();
  }
}
