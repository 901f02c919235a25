package org.themis.am;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.DataOutputBuffer;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.security.token.TokenIdentifier;
import org.apache.hadoop.yarn.api.protocolrecords.RegisterApplicationMasterResponse;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.LocalResource;
import org.apache.hadoop.yarn.api.records.NodeReport;
import org.apache.hadoop.yarn.api.records.NodeState;
import org.apache.hadoop.yarn.api.records.PreemptionContainer;
import org.apache.hadoop.yarn.api.records.PreemptionMessage;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.UpdatedContainer;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.client.api.async.AMRMClientAsync;
import org.apache.hadoop.yarn.client.api.async.NMClientAsync;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;

/**
 * What the Python AM can ask of YARN (the Py4J entry point). Every method takes and returns
 * plain strings and numbers; YARN callbacks become JSON events that Python drains with
 * {@link #pollEvents(long)} (no Python callback server needed).
 *
 * <p>GPU asks are node-local: {@code ContainerRequest(resource, {host}, null, priority,
 * relaxLocality=false)}, each with its own allocation-request id, removed as soon as it is
 * satisfied or cancelled. The host {@code "*"} asks anywhere instead ({@code relaxLocality=true},
 * no node or rack): the AM on a cluster without a Themis arbiter, where YARN's scheduler picks
 * the node (themis/am/launchers/yarn/stock.py).
 */
public final class AmShell {
  public static final String GPU = "yarn.io/gpu";
  private static final ObjectMapper JSON = new ObjectMapper();

  private final Configuration conf;
  private final LinkedBlockingQueue<String> events = new LinkedBlockingQueue<>();
  private final Map<Long, ContainerRequest> requests = new ConcurrentHashMap<>();
  private final Map<String, Container> containers = new ConcurrentHashMap<>();
  private final AtomicLong nextRequestId = new AtomicLong(1);
  private volatile float progress;
  private volatile boolean unregistered;
  private AMRMClientAsync<ContainerRequest> amrm;
  private NMClientAsync nm;
  private YarnClient yarn;

  public AmShell(Configuration conf) {
    this.conf = conf;
  }

  // ------------------------------------------------------------------ called from Python
  /** Value of a configuration key (yarn-site.xml of the container), or the default. */
  public String conf(String key, String dflt) {
    return conf.get(key, dflt);
  }

  public String env(String key) {
    String v = System.getenv(key);
    return v == null ? "" : v;
  }

  /**
   * This AM's AMRMToken in Hadoop's URL-safe encoding: its registration token for the Themis
   * agents' endpoint, which asks the RM to check it (docs/yarn.md, "Security"). The RM put it
   * in the container's credentials; AMRMClient replaces it there when the RM rolls its master
   * key, so it is read anew for every registration. Empty if the container has none.
   */
  public String amRmToken() throws java.io.IOException {
    for (Token<?> t : UserGroupInformation.getCurrentUser().getTokens()) {
      if (AMRMTokenIdentifier.KIND_NAME.equals(t.getKind())) {
        return t.encodeToUrlString();
      }
    }
    return "";
  }

  /** Starts the clients and registers with the RM; returns the registration as JSON. */
  public synchronized String start(String host, int rpcPort, String trackingUrl, int heartbeatMs)
      throws Exception {
    amrm = AMRMClientAsync.createAMRMClientAsync(heartbeatMs, new RmHandler());
    amrm.init(conf);
    amrm.start();
    nm = NMClientAsync.createNMClientAsync(new NmHandler());
    nm.init(conf);
    nm.start();
    RegisterApplicationMasterResponse r = amrm.registerApplicationMaster(host, rpcPort, trackingUrl);
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("max_memory_mb", r.getMaximumResourceCapability().getMemorySize());
    out.put("max_vcores", r.getMaximumResourceCapability().getVirtualCores());
    out.put("queue", r.getQueue());
    List<Map<String, Object>> previous = new ArrayList<>();
    for (Container c : r.getContainersFromPreviousAttempts()) {
      containers.put(c.getId().toString(), c);
      previous.add(describe(c));
    }
    out.put("previous_containers", previous);
    AppMaster.log("registered with the RM; tracking URL " + trackingUrl);
    return JSON.writeValueAsString(out);
  }

  /**
   * The RUNNING nodes (JSON list: node, host, http, rack, gpus, used_gpus), via the RM's client
   * API; http is the NodeManager's web address (host:port).
   */
  public synchronized String nodes() throws Exception {
    if (yarn == null) {
      yarn = YarnClient.createYarnClient();
      yarn.init(conf);
      yarn.start();
    }
    List<Map<String, Object>> out = new ArrayList<>();
    for (NodeReport r : yarn.getNodeReports(NodeState.RUNNING)) {
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("node", r.getNodeId().toString());
      m.put("host", r.getNodeId().getHost());
      m.put("http", r.getHttpAddress());
      m.put("rack", r.getRackName());
      m.put("gpus", gpusOf(r.getCapability()));
      m.put("used_gpus", r.getUsed() == null ? 0 : gpusOf(r.getUsed()));
      out.add(m);
    }
    return JSON.writeValueAsString(out);
  }

  private static long gpusOf(Resource r) {
    try {
      return r.getResourceValue(GPU);
    } catch (Exception e) {
      return 0;
    }
  }

  /** The host of an ask anywhere (YARN's ResourceRequest.ANY). */
  public static final String ANY_HOST = "*";

  /**
   * A node-local container ask on {@code host}, or an ask anywhere for {@link #ANY_HOST};
   * returns its allocation-request id.
   */
  public long request(String host, int memoryMb, int vcores, int gpus, int priority) {
    Resource res = Resource.newInstance(memoryMb, vcores);
    if (gpus > 0) {
      res.setResourceValue(GPU, gpus);
    }
    long id = nextRequestId.getAndIncrement();
    boolean anywhere = ANY_HOST.equals(host);
    ContainerRequest.ContainerRequestBuilder b = ContainerRequest.newBuilder()
        .capability(res)
        .priority(Priority.newInstance(priority))
        .relaxLocality(anywhere)
        .allocationRequestId(id);
    if (!anywhere) {
      b.nodes(new String[] {host});
    }
    ContainerRequest req = b.build();
    requests.put(id, req);
    amrm.addContainerRequest(req);
    return id;
  }

  /** Withdraws an ask not yet satisfied (no-op if it was). */
  public void cancelRequest(long id) {
    ContainerRequest req = requests.remove(id);
    if (req != null) {
      amrm.removeContainerRequest(req);
    }
  }

  /** Launches {@code command} (run by bash in the container) with {@code envJson} (a map). */
  public void launch(String containerId, String command, String envJson) throws Exception {
    Container c = containers.get(containerId);
    if (c == null) {
      throw new IllegalArgumentException("unknown container " + containerId);
    }
    Map<String, String> env = JSON.readValue(envJson, new TypeReference<HashMap<String, String>>() {});
    ContainerLaunchContext ctx = ContainerLaunchContext.newInstance(
        new HashMap<String, LocalResource>(), env, Collections.singletonList(command), null,
        containerTokens(), null);
    nm.startContainerAsync(c, ctx);
  }

  /**
   * The app's tokens for a job container: the submission's delegation tokens (HDFS, RM) that
   * YARN gave this AM, so that the job's runner reaches HDFS as the app's user on a secure
   * cluster (docs/install.md, "Security and Kerberos"); never the AMRMToken, which would let
   * a job speak for the AM. Null when there is nothing to pass (a cluster without security).
   */
  private static ByteBuffer containerTokens() throws java.io.IOException {
    Credentials own = UserGroupInformation.getCurrentUser().getCredentials();
    Credentials out = new Credentials();
    for (Map.Entry<Text, Token<? extends TokenIdentifier>> e : own.getTokenMap().entrySet()) {
      if (!AMRMTokenIdentifier.KIND_NAME.equals(e.getValue().getKind())) {
        out.addToken(e.getKey(), e.getValue());
      }
    }
    if (out.numberOfTokens() == 0) {
      return null;
    }
    DataOutputBuffer buf = new DataOutputBuffer();
    out.writeTokenStorageToStream(buf);
    return ByteBuffer.wrap(buf.getData(), 0, buf.getLength());
  }

  /** Asks the NM to stop a container (SIGTERM, then SIGKILL after the NM's delay). */
  public void stopContainer(String containerId) {
    Container c = containers.get(containerId);
    if (c != null) {
      nm.stopContainerAsync(c.getId(), c.getNodeId());
    }
  }

  /** Gives a container back to the RM (kills it if still running). */
  public void release(String containerId) {
    Container c = containers.remove(containerId);
    if (c != null) {
      amrm.releaseAssignedContainer(c.getId());
    } else {
      amrm.releaseAssignedContainer(ContainerId.fromString(containerId));
    }
  }

  public void setProgress(double p) {
    progress = (float) Math.max(0.0, Math.min(1.0, p));
  }

  /** Waits up to {@code timeoutMs} for events; returns a JSON array (maybe empty). */
  public String pollEvents(long timeoutMs) throws Exception {
    List<Object> out = new ArrayList<>();
    String first = events.poll(timeoutMs, TimeUnit.MILLISECONDS);
    if (first != null) {
      out.add(JSON.readTree(first));
      List<String> rest = new ArrayList<>();
      events.drainTo(rest);
      for (String e : rest) {
        out.add(JSON.readTree(e));
      }
    }
    return JSON.writeValueAsString(out);
  }

  /** Unregisters with SUCCEEDED, FAILED or KILLED. */
  public synchronized void finish(String status, String message, String trackingUrl)
      throws Exception {
    if (unregistered || amrm == null) {
      return;
    }
    amrm.unregisterApplicationMaster(FinalApplicationStatus.valueOf(status), message,
        trackingUrl == null || trackingUrl.isEmpty() ? null : trackingUrl);
    unregistered = true;
    AppMaster.log("unregistered: " + status + " " + message);
  }

  public boolean isUnregistered() {
    return unregistered;
  }

  synchronized void close() {
    try {
      if (nm != null) {
        nm.stop();
      }
      if (amrm != null) {
        amrm.stop();
      }
      if (yarn != null) {
        yarn.stop();
      }
    } catch (Exception e) {
      AppMaster.log("close: " + e);
    }
  }

  // ------------------------------------------------------------------ YARN callbacks
  private void emit(Map<String, Object> event) {
    try {
      events.add(JSON.writeValueAsString(event));
    } catch (Exception e) {
      AppMaster.log("cannot encode event: " + e);
    }
  }

  private static Map<String, Object> event(String type) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("type", type);
    m.put("time", System.currentTimeMillis() / 1000.0);
    return m;
  }

  private static Map<String, Object> describe(Container c) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("container", c.getId().toString());
    m.put("node", c.getNodeId().toString());
    m.put("host", c.getNodeId().getHost());
    m.put("memory_mb", c.getResource().getMemorySize());
    m.put("vcores", c.getResource().getVirtualCores());
    m.put("gpus", gpusOf(c.getResource()));
    m.put("request_id", c.getAllocationRequestId());
    return m;
  }

  private final class RmHandler extends AMRMClientAsync.AbstractCallbackHandler {
    @Override
    public void onContainersAllocated(List<Container> allocated) {
      for (Container c : allocated) {
        containers.put(c.getId().toString(), c);
        ContainerRequest req = requests.remove(c.getAllocationRequestId());
        if (req != null) {
          amrm.removeContainerRequest(req);
        }
        Map<String, Object> e = event("allocated");
        e.putAll(describe(c));
        emit(e);
      }
    }

    @Override
    public void onContainersCompleted(List<ContainerStatus> statuses) {
      for (ContainerStatus s : statuses) {
        containers.remove(s.getContainerId().toString());
        Map<String, Object> e = event("completed");
        e.put("container", s.getContainerId().toString());
        e.put("exit_status", s.getExitStatus());
        e.put("state", s.getState().toString());
        e.put("diagnostics", s.getDiagnostics());
        emit(e);
      }
    }

    @Override
    public void onContainersUpdated(List<UpdatedContainer> updated) {}

    @Override
    public void onShutdownRequest() {
      emit(event("shutdown"));
    }

    /**
     * Nodes YARN took out of service (LOST after the NodeManager liveness expiry,
     * decommissioned, shut down, unhealthy): the RM ended the app's leases there, and the
     * Python AM drops them from its view (docs/am.md, "Faults").
     */
    @Override
    public void onNodesUpdated(List<NodeReport> reports) {
      List<String> unusable = new ArrayList<>();
      for (NodeReport r : reports) {
        if (r.getNodeState() != null && r.getNodeState().isUnusable()) {
          unusable.add(r.getNodeId().toString());
        }
      }
      if (!unusable.isEmpty()) {
        Map<String, Object> e = event("nodes_unusable");
        e.put("nodes", unusable);
        emit(e);
      }
    }

    @Override
    public float getProgress() {
      return progress;
    }

    @Override
    public void onError(Throwable t) {
      Map<String, Object> e = event("error");
      e.put("message", String.valueOf(t));
      emit(e);
    }

    @Override
    public void onPreemptionMessageReceived(PreemptionMessage msg) {
      List<String> ids = new ArrayList<>();
      if (msg.getStrictContract() != null) {
        for (PreemptionContainer c : msg.getStrictContract().getContainers()) {
          ids.add(c.getId().toString());
        }
      }
      if (msg.getContract() != null) {
        for (PreemptionContainer c : msg.getContract().getContainers()) {
          ids.add(c.getId().toString());
        }
      }
      Map<String, Object> e = event("preemption");
      e.put("containers", ids);
      emit(e);
    }
  }

  private final class NmHandler extends NMClientAsync.AbstractCallbackHandler {
    @Override
    public void onContainerStarted(ContainerId id, Map<String, ByteBuffer> meta) {
      Map<String, Object> e = event("started");
      e.put("container", id.toString());
      emit(e);
    }

    @Override
    public void onContainerStatusReceived(ContainerId id, ContainerStatus status) {}

    @Override
    public void onContainerStopped(ContainerId id) {
      Map<String, Object> e = event("stopped");
      e.put("container", id.toString());
      emit(e);
    }

    @Override
    public void onStartContainerError(ContainerId id, Throwable t) {
      Map<String, Object> e = event("start_failed");
      e.put("container", id.toString());
      e.put("message", String.valueOf(t));
      emit(e);
    }

    @Override
    public void onContainerResourceIncreased(ContainerId id, Resource r) {}

    @Override
    public void onContainerResourceUpdated(ContainerId id, Resource r) {}

    @Override
    public void onGetContainerStatusError(ContainerId id, Throwable t) {}

    @Override
    public void onIncreaseContainerResourceError(ContainerId id, Throwable t) {}

    @Override
    public void onUpdateContainerResourceError(ContainerId id, Throwable t) {}

    @Override
    public void onStopContainerError(ContainerId id, Throwable t) {
      Map<String, Object> e = event("stop_failed");
      e.put("container", id.toString());
      e.put("message", String.valueOf(t));
      emit(e);
    }
  }
}
