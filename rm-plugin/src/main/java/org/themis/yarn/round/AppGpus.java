package org.themis.yarn.round;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Map;
import java.util.NavigableMap;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;

/**
 * An app's GPU situation as one pass of the round driver sees it ({@link ClusterView#appGpus}):
 * whether its AM has a Themis agent, its pending GPU asks by container size (GPUs per container
 * -> containers) in the partition they name, that partition (node label, "" for the default
 * partition; docs/yarn.md, "Partitions") and the GPUs of its live containers per node.
 */
public final class AppGpus {
  private final ApplicationId app;
  private final boolean agent;
  private final NavigableMap<Long, Long> asks;
  private final Map<NodeId, Long> running;
  private final String partition;

  public AppGpus(ApplicationId app, boolean agent, NavigableMap<Long, Long> asks,
      Map<NodeId, Long> running, String partition) {
    this.app = app;
    this.agent = agent;
    this.asks = asks;
    this.running = running;
    this.partition = partition;
  }

  /** The partition its GPU asks name (else its app's or queue's default), "" the default. */
  public String partition() {
    return partition;
  }

  public ApplicationId app() {
    return app;
  }

  public boolean agent() {
    return agent;
  }

  public NavigableMap<Long, Long> asks() {
    return asks;
  }

  public Map<NodeId, Long> running() {
    return running;
  }

  public long askedGpus() {
    long sum = 0;
    for (Map.Entry<Long, Long> e : asks.entrySet()) {
      sum += e.getKey() * e.getValue();
    }
    return sum;
  }

  public long smallestContainer() {
    return asks.isEmpty() ? 0 : asks.firstKey();
  }

  /**
   * Puts the app's GPUs in use per node ({@code "running_gpus"}) and its pending asks by
   * container shape ({@code "asks"}) into {@code o}, as both the engine's view and the status
   * bean report them.
   */
  public void putGpuUse(ObjectNode o) {
    ObjectNode out = o.putObject("running_gpus");
    for (Map.Entry<NodeId, Long> r : running.entrySet()) {
      out.put(r.getKey().toString(), r.getValue());
    }
    ArrayNode shapes = o.putArray("asks");
    for (Map.Entry<Long, Long> k : asks.entrySet()) {
      ObjectNode ask = shapes.addObject();
      ask.put("gpus_per_container", k.getKey());
      ask.put("containers", k.getValue());
    }
  }
}
