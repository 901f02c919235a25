package org.themis.yarn;

import java.security.PrivilegedExceptionAction;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.yarn.api.protocolrecords.AllocateResponse;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.PreemptionContainer;
import org.apache.hadoop.yarn.api.records.PreemptionMessage;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.client.ClientRMProxy;
import org.apache.hadoop.yarn.client.api.AMRMClient;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.NMClient;
import org.apache.hadoop.yarn.client.api.YarnClientApplication;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.RMApp;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.attempt.RMAppAttempt;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.attempt.RMAppAttemptState;
import org.themis.yarn.round.AppGpus;

/** An unmanaged AM speaking the real AM-RM protocol to the mini cluster's RM. */
final class TestAm {
  final ApplicationId appId;
  private final UserGroupInformation ugi;
  private final AMRMClient<ContainerRequest> amrm;
  private NMClient nm;
  final List<Container> allocated = new ArrayList<>();
  final Set<ContainerId> preemptAsked = new HashSet<>();
  final List<ContainerStatus> completed = new ArrayList<>();

  private TestAm(ApplicationId appId, UserGroupInformation ugi, AMRMClient<ContainerRequest> amrm) {
    this.appId = appId;
    this.ugi = ugi;
    this.amrm = amrm;
  }

  /** {@code app}'s submission context for an unmanaged AM named {@code name} in {@code queue}. */
  static ApplicationSubmissionContext unmanaged(YarnClientApplication app, String name,
      String queue) {
    ApplicationSubmissionContext ctx = app.getApplicationSubmissionContext();
    ctx.setApplicationName(name);
    ctx.setQueue(queue);
    ctx.setPriority(Priority.newInstance(0));
    ctx.setAMContainerSpec(ContainerLaunchContext.newInstance(
        Map.of(), Map.of(), List.of(), Map.of(), null, Map.of()));
    ctx.setResource(Resource.newInstance(128, 1));
    ctx.setUnmanagedAM(true);
    return ctx;
  }

  static TestAm start(ThemisMiniCluster c, String name) throws Exception {
    return start(c, name, "default");
  }

  /** Submits an unmanaged AM named {@code name} (also its user) to {@code queue}. */
  static TestAm start(ThemisMiniCluster c, String name, String queue) throws Exception {
    YarnClientApplication app = c.client.createApplication();
    ApplicationSubmissionContext ctx = unmanaged(app, name, queue);
    ApplicationId id = ctx.getApplicationId();
    c.client.submitApplication(ctx);
    RMApp rmApp = c.cluster.getResourceManager().getRMContext().getRMApps().get(id);
    ThemisMiniCluster.waitFor("AM attempt of " + id + " launched", 30_000, () -> {
      RMAppAttempt a = rmApp.getCurrentAppAttempt();
      return a != null && a.getAppAttemptState() == RMAppAttemptState.LAUNCHED;
    });
    Token<AMRMTokenIdentifier> token = rmApp.getCurrentAppAttempt().getAMRMToken();
    token.setService(ClientRMProxy.getAMRMTokenService(c.cluster.getConfig()));
    UserGroupInformation ugi = UserGroupInformation.createRemoteUser(name);
    ugi.addToken(token);
    AMRMClient<ContainerRequest> amrm = ugi.doAs(
        (PrivilegedExceptionAction<AMRMClient<ContainerRequest>>) () -> {
          AMRMClient<ContainerRequest> cl = AMRMClient.createAMRMClient();
          cl.init(c.cluster.getConfig());
          cl.start();
          cl.registerApplicationMaster("localhost", 0, "");
          return cl;
        });
    return new TestAm(id, ugi, amrm);
  }

  /** This AM's AMRMToken in Hadoop's URL-safe encoding (its registration token). */
  String amRmToken() throws java.io.IOException {
    for (Token<?> t : ugi.getTokens()) {
      if (AMRMTokenIdentifier.KIND_NAME.equals(t.getKind())) {
        return t.encodeToUrlString();
      }
    }
    throw new IllegalStateException("no AMRMToken in " + appId + "'s credentials");
  }

  /**
   * Starts {@code themis.agent.probe} as this app's agent, registering with its AMRMToken at
   * the agents' endpoint {@code address}; its output lines are appended to {@code lines}.
   */
  Process startProbe(String address, List<String> lines, String... args) throws Exception {
    List<String> cmd = new ArrayList<>(List.of(ThemisMiniCluster.testPython(), "-m",
        "themis.agent.probe", "--arbiter", address, "--app-id", appId.toString()));
    cmd.addAll(List.of(args));
    ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
    // the AM's AMRMToken registers it: the engine asks this RM to check it (AmTokens)
    pb.environment().put("THEMIS_REGISTRATION_TOKEN", amRmToken());
    Process probe = pb.start();
    Thread reader = new Thread(() -> {
      try (java.io.BufferedReader r = new java.io.BufferedReader(new java.io.InputStreamReader(
          probe.getInputStream(), java.nio.charset.StandardCharsets.UTF_8))) {
        String line;
        while ((line = r.readLine()) != null) {
          lines.add(line);
        }
      } catch (java.io.IOException ignored) {
        // process gone
      }
    });
    reader.setDaemon(true);
    reader.start();
    return probe;
  }

  void ask(int n, int gpusEach) {
    Resource r = Resource.newInstance(128, 1);
    r.setResourceValue(Gpus.GPU, gpusEach);
    for (int i = 0; i < n; i++) {
      // The RM keeps one ask per (priority, allocation id): GPU and non-GPU asks differ in both.
      amrm.addContainerRequest(new ContainerRequest(r, null, null,
          Priority.newInstance(gpusEach > 0 ? 1 : 2), gpusEach > 0 ? 1L : 2L, true, null));
    }
  }

  /**
   * Withdraws {@code n} asks made with {@link #ask}: the next {@link #poll()} sends the lower
   * total. An AM that re-registers with a restarted RM sends its whole outstanding ask again;
   * an AM whose asks were all served withdraws them so that it asks for nothing more then.
   */
  void unask(int n, int gpusEach) {
    Resource r = Resource.newInstance(128, 1);
    r.setResourceValue(Gpus.GPU, gpusEach);
    for (int i = 0; i < n; i++) {
      amrm.removeContainerRequest(new ContainerRequest(r, null, null,
          Priority.newInstance(gpusEach > 0 ? 1 : 2), gpusEach > 0 ? 1L : 2L, true, null));
    }
  }

  AllocateResponse poll() throws Exception {
    AllocateResponse resp = ugi.doAs(
        (PrivilegedExceptionAction<AllocateResponse>) () -> amrm.allocate(0.1f));
    for (Container ct : resp.getAllocatedContainers()) {
      // Asks are not removed on purpose: AMRMClient then never re-sends a stale total, so
      // the RM's own decrementing count gives exactly the number asked.
      allocated.add(ct);
    }
    completed.addAll(resp.getCompletedContainersStatuses());
    PreemptionMessage pm = resp.getPreemptionMessage();
    if (pm != null && pm.getStrictContract() != null) {
      for (PreemptionContainer pc : pm.getStrictContract().getContainers()) {
        preemptAsked.add(pc.getId());
      }
    }
    if (pm != null && pm.getContract() != null) {
      for (PreemptionContainer pc : pm.getContract().getContainers()) {
        preemptAsked.add(pc.getId());
      }
    }
    return resp;
  }

  /** {@link #poll()} for lambdas: a failure becomes an unchecked exception. */
  void pollUnchecked() {
    try {
      poll();
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }

  /**
   * Polls until {@code mc}'s round driver sees this AM asking at least {@code n} GPUs (its
   * asks have reached the scheduler), at most 15 s.
   */
  void awaitAsked(ThemisMiniCluster mc, long n) throws InterruptedException {
    ThemisMiniCluster.waitFor(appId + " asking " + n + " GPUs", 15_000, () -> {
      pollUnchecked();
      for (AppGpus g : mc.scheduler().runtime().cluster().appGpus()) {
        if (g.app().equals(appId)) {
          return g.askedGpus() >= n;
        }
      }
      return false;
    });
  }

  /** Polls until this AM holds at least {@code n} GPU containers, at most {@code ms}. */
  void awaitGpuContainers(int n, long ms) throws InterruptedException {
    ThemisMiniCluster.waitFor(appId + " to hold " + n + " GPU container(s)", ms, () -> {
      pollUnchecked();
      return gpuContainers().size() >= n;
    });
  }

  /** Gives a container back to the RM (sent with the next {@link #poll()}). */
  void release(ContainerId id) {
    amrm.releaseAssignedContainer(id);
  }

  /** Polls for {@code ms}, returning the containers allocated meanwhile. */
  List<Container> pollFor(long ms) throws Exception {
    int before = allocated.size();
    long end = System.currentTimeMillis() + ms;
    while (System.currentTimeMillis() < end) {
      poll();
      Thread.sleep(100);
    }
    return new ArrayList<>(allocated.subList(before, allocated.size()));
  }

  List<Container> gpuContainers() {
    List<Container> out = new ArrayList<>();
    for (Container ct : allocated) {
      if (Gpus.of(ct.getResource()) > 0) {
        out.add(ct);
      }
    }
    return out;
  }

  long gpusOn(NodeId node) {
    long sum = 0;
    Set<ContainerId> done = new HashSet<>();
    for (ContainerStatus s : completed) {
      done.add(s.getContainerId());
    }
    for (Container ct : allocated) {
      if (!done.contains(ct.getId()) && ct.getNodeId().equals(node)) {
        sum += Gpus.of(ct.getResource());
      }
    }
    return sum;
  }

  /**
   * Starts {@code command} in an allocated container on its NodeManager (NM tokens come with
   * the allocate responses), so that the container really runs and survives an RM restart.
   */
  void launch(ThemisMiniCluster c, Container ct, String command) throws Exception {
    if (nm == null) {
      nm = NMClient.createNMClient();
      nm.init(c.cluster.getConfig());
      nm.start();
    }
    nm.startContainer(ct, ContainerLaunchContext.newInstance(
        java.util.Collections.<String, org.apache.hadoop.yarn.api.records.LocalResource>emptyMap(),
        java.util.Collections.<String, String>emptyMap(),
        java.util.Collections.singletonList(command), null, null, null));
  }

  void finish() throws Exception {
    ugi.doAs((PrivilegedExceptionAction<Void>) () -> {
      amrm.unregisterApplicationMaster(FinalApplicationStatus.SUCCEEDED, "", "");
      amrm.stop();
      if (nm != null) {
        nm.stop();
      }
      return null;
    });
  }
}
