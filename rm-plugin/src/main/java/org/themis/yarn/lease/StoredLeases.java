package org.themis.yarn.lease;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;

/**
 * What the plugin keeps across a ResourceManager restart (docs/yarn.md, "Restart and HA"):
 * the lease table, the id of the next lease and the apps whose AM spoke to the agents'
 * endpoint. Stored as one small JSON document (version 1):
 *
 * <pre>
 * {"version":1, "written_ms":..., "next_id":7, "agent_apps":["application_..."],
 *  "leases":[{"id":3, "app":"application_...", "node":"host:port", "gpus":2,
 *             "granted_ms":..., "expiry_ms":..., "state":"ACTIVE", "grace_deadline_ms":0,
 *             "partition":"gpu"}]}
 * </pre>
 *
 * <p>{@code partition} (the node label of the lease's node at the grant, docs/yarn.md,
 * "Partitions") is written only for a lease outside the default partition; a record without
 * it, as every record written before node labels, is a default-partition lease. So the
 * version stays 1: older plugins read the new records (they ignore the field) and this one
 * reads theirs.
 */
public final class StoredLeases {
  static final int VERSION = 1;
  private static final ObjectMapper JSON = new ObjectMapper();

  private final List<Lease> leases;
  private final long nextId;
  private final Set<ApplicationId> agentApps;
  private final long writtenMs;

  public StoredLeases(List<Lease> leases, long nextId, Set<ApplicationId> agentApps,
      long writtenMs) {
    this.leases = Collections.unmodifiableList(new ArrayList<Lease>(leases));
    this.nextId = nextId;
    this.agentApps = Collections.unmodifiableSet(new TreeSet<ApplicationId>(agentApps));
    this.writtenMs = writtenMs;
  }

  public List<Lease> leases() { return leases; }
  public long nextId() { return nextId; }
  public Set<ApplicationId> agentApps() { return agentApps; }
  public long writtenMs() { return writtenMs; }

  public byte[] toJson() {
    ObjectNode root = JSON.createObjectNode();
    root.put("version", VERSION);
    root.put("written_ms", writtenMs);
    root.put("next_id", nextId);
    ArrayNode agents = root.putArray("agent_apps");
    for (ApplicationId a : agentApps) {
      agents.add(a.toString());
    }
    ArrayNode ls = root.putArray("leases");
    for (Lease l : leases) {
      ObjectNode o = ls.addObject();
      o.put("id", l.id());
      o.put("app", l.app().toString());
      o.put("node", l.node().toString());
      o.put("gpus", l.gpus());
      o.put("granted_ms", l.grantedAtMs());
      o.put("expiry_ms", l.expiryMs());
      o.put("state", l.state().name());
      o.put("grace_deadline_ms", l.graceDeadlineMs());
      if (!l.partition().isEmpty()) {
        o.put("partition", l.partition());
      }
    }
    return root.toString().getBytes(StandardCharsets.UTF_8);
  }

  /** Parses a stored document; throws IOException naming {@code where} and the problem. */
  public static StoredLeases fromJson(byte[] data, String where) throws IOException {
    JsonNode root;
    try {
      root = JSON.readTree(data);
    } catch (IOException e) {
      throw new IOException("Themis lease store " + where + ": not JSON (" + e.getMessage() + ")",
          e);
    }
    if (root == null || !root.isObject()) {
      throw new IOException("Themis lease store " + where + ": not a JSON object");
    }
    int version = root.path("version").asInt(-1);
    if (version != VERSION) {
      throw new IOException("Themis lease store " + where + ": version " + version
          + " is not the version this plugin reads (" + VERSION + ")");
    }
    try {
      List<Lease> leases = new ArrayList<Lease>();
      for (JsonNode o : root.path("leases")) {
        int gpus = o.path("gpus").asInt(0);
        if (gpus <= 0) {
          throw new IllegalArgumentException("lease " + o + " covers no GPU");
        }
        leases.add(new Lease(o.path("id").asLong(), ApplicationId.fromString(text(o, "app")),
            NodeId.fromString(text(o, "node")), gpus, o.path("granted_ms").asLong(),
            o.path("expiry_ms").asLong(), Lease.State.valueOf(text(o, "state")),
            o.path("grace_deadline_ms").asLong(), o.path("partition").asText("")));
      }
      Set<ApplicationId> agents = new TreeSet<ApplicationId>();
      for (JsonNode a : root.path("agent_apps")) {
        agents.add(ApplicationId.fromString(a.asText()));
      }
      return new StoredLeases(leases, root.path("next_id").asLong(1),
          agents, root.path("written_ms").asLong());
    } catch (IllegalArgumentException e) {
      throw new IOException("Themis lease store " + where + ": bad record: " + e.getMessage(), e);
    }
  }

  private static String text(JsonNode o, String field) {
    JsonNode v = o.get(field);
    if (v == null || !v.isTextual()) {
      throw new IllegalArgumentException("field '" + field + "' missing in " + o);
    }
    return v.asText();
  }
}
