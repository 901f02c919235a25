package org.themis.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.themis.yarn.AgentReplies.assertOk;
import static org.themis.yarn.AgentReplies.assertRefused;
import static org.themis.yarn.AgentReplies.decode;

import java.io.File;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.PrivilegedExceptionAction;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import org.apache.hadoop.fs.CommonConfigurationKeysPublic;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.UserGroupInformation.AuthenticationMethod;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.YarnApplicationState;
import org.apache.hadoop.yarn.client.ClientRMProxy;
import org.apache.hadoop.yarn.client.api.AMRMClient;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.RMApp;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.RMAppState;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.attempt.RMAppAttempt;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.attempt.RMAppAttemptState;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The plugin in a ResourceManager with Kerberos on (issue 33): a MiniKdc in the test JVM, a
 * real RM (ThemisCapacityScheduler, the real Python engine) and a NodeManager with 4 GPUs,
 * {@code hadoop.security.authentication=kerberos}, the daemons' service principal
 * {@code yarn/localhost} from a keytab, {@code yarn.acl.enable=true}, {@code yarn.admin.acl}
 * = admin, and leaf queues root.alice and root.bob whose submit ACLs let only alice, resp.
 * bob, submit (root's ACLs emptied: a parent's ACL would let anyone in). The users log in
 * from their own keytabs ({@code loginUserFromKeytabAndReturnUGI}) and speak to the RM over
 * Kerberos-authenticated RPC; an unauthenticated caller is refused.
 *
 * <p>MiniYARNCluster skips the daemons' own keytab login, so the test logs the JVM in as
 * the service principal before it starts: the RM's and NM's RPC servers accept GSSAPI for
 * {@code yarn/localhost}, whose name clients take from {@code yarn.resourcemanager.principal}.
 * The class runs in a JVM of its own (surefire: reuseForks=false); it still puts back what
 * it changed (UGI's static state, {@code java.security.krb5.conf}).
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class SecureRmIT {
  private static final String SERVICE = "yarn/localhost";
  private static final String METRICS = "Hadoop:service=*,name=ThemisMetrics";

  private static Path workDir;
  private static MiniKdc kdc;
  private static String krb5ConfBefore;
  private static ThemisMiniCluster mc;
  private static UserGroupInformation alice;
  private static UserGroupInformation bob;
  private static UserGroupInformation admin;

  @BeforeAll
  static void up() throws Exception {
    krb5ConfBefore = System.getProperty(MiniKdc.JAVA_SECURITY_KRB5_CONF);
    workDir = Files.createTempDirectory("themis-secure-rm");
    // first, before anything reads the Kerberos configuration: MiniKdc.start() points
    // java.security.krb5.conf at its krb5.conf (realm EXAMPLE.COM, KDC on an ephemeral port)
    kdc = new MiniKdc(MiniKdc.createConf(), workDir.toFile());
    kdc.start();
    assertEquals(kdc.getKrb5conf().getAbsolutePath(),
        System.getProperty(MiniKdc.JAVA_SECURITY_KRB5_CONF));
    String realm = kdc.getRealm();
    File serviceKeytab = keytab(SERVICE.replace('/', '_'), SERVICE);

    YarnConfiguration conf = ThemisMiniCluster.baseConf(4);
    conf.set(CommonConfigurationKeysPublic.HADOOP_SECURITY_AUTHENTICATION, "kerberos");
    String principal = SERVICE + "@" + realm;
    conf.set(YarnConfiguration.RM_PRINCIPAL, principal);
    conf.set(YarnConfiguration.RM_KEYTAB, serviceKeytab.getAbsolutePath());
    conf.set(YarnConfiguration.NM_PRINCIPAL, principal);
    conf.set(YarnConfiguration.NM_KEYTAB, serviceKeytab.getAbsolutePath());
    conf.setBoolean(YarnConfiguration.YARN_ACL_ENABLE, true);
    conf.set(YarnConfiguration.YARN_ADMIN_ACL, "admin");
    String q = "yarn.scheduler.capacity.root.";
    conf.set(q + "queues", "alice,bob");
    // root's ACLs default to "*" and a queue's ACL includes its parents': nobody at root
    conf.set(q + "acl_submit_applications", " ");
    conf.set(q + "acl_administer_queue", " ");
    for (String leaf : new String[] {"alice", "bob"}) {
      conf.set(q + leaf + ".capacity", "50");
      conf.set(q + leaf + ".maximum-capacity", "100");
      conf.set(q + leaf + ".acl_submit_applications", leaf);
    }
    // the real engine, as ThemisMetricsIT: a round every 300 ms, long leases
    conf.set(ThemisSettings.PYTHON_EXECUTABLE, ThemisMiniCluster.testPython());
    conf.setLong(ThemisSettings.ROUND_INTERVAL_MS, 300);
    conf.setLong(ThemisSettings.LEASE_DURATION_MS, 600_000);

    UserGroupInformation.setConfiguration(conf);
    UserGroupInformation.loginUserFromKeytab(principal, serviceKeytab.getAbsolutePath());
    assertTrue(UserGroupInformation.isSecurityEnabled());
    assertEquals(AuthenticationMethod.KERBEROS,
        UserGroupInformation.getLoginUser().getAuthenticationMethod());

    mc = new ThemisMiniCluster("themis-secure", 1, conf);
    mc.awaitEngine();
    alice = login("alice");
    bob = login("bob");
    admin = login("admin");
  }

  @AfterAll
  static void down() throws IOException {
    try {
      if (mc != null) {
        mc.close();
      }
    } finally {
      if (kdc != null) {
        kdc.stop();
      }
      UserGroupInformation.reset(); // back to simple authentication, no login user
      if (krb5ConfBefore == null) {
        System.clearProperty(MiniKdc.JAVA_SECURITY_KRB5_CONF);
      } else {
        System.setProperty(MiniKdc.JAVA_SECURITY_KRB5_CONF, krb5ConfBefore);
      }
      if (workDir != null) {
        try (Stream<Path> s = Files.walk(workDir)) {
          s.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
        }
      }
    }
  }

  /**
   * alice (a Kerberos login) submits to her queue: accepted, owned by alice. Her unmanaged
   * AM, with its AMRMToken, asks for a GPU container; the engine's round leases her a GPU and
   * the container is granted through the lease; the plugin's metrics source counts it.
   */
  @Test
  void aliceSubmitsToHerQueueAndGetsAGpuThroughALease() throws Exception {
    assertEquals(AuthenticationMethod.KERBEROS, alice.getAuthenticationMethod());
    assertTrue(alice.hasKerberosCredentials());
    ThemisCapacityScheduler s = mc.scheduler();
    assertTrue(s.runtime().running() && s.runtime().engine().pid() > 0, "Themis engine up");

    YarnClient yc = client(alice);
    ApplicationId id = submit(alice, yc, "alice-gpu", "alice");
    RMApp app = rmApp(id);
    assertEquals("alice", app.getUser(), "the RM's user is the Kerberos principal's short name");
    assertTrue(app.getQueue().endsWith("alice"), app.getQueue());
    YarnApplicationState st = yc.getApplicationReport(id).getYarnApplicationState();
    assertTrue(st == YarnApplicationState.ACCEPTED || st == YarnApplicationState.RUNNING,
        "alice's app accepted: " + st);

    SecureAm am = SecureAm.register(id);
    am.ask(1, 1);
    List<Container> got = new ArrayList<>();
    ThemisMiniCluster.waitFor("GPU container granted by a round", 60_000, () -> {
      got.addAll(am.pollUnchecked());
      return got.stream().anyMatch(c -> Gpus.of(c.getResource()) == 1);
    });
    Container gpu = got.stream().filter(c -> Gpus.of(c.getResource()) == 1).findFirst().get();
    assertEquals(1, s.leases().liveGpus(id, gpu.getNodeId()),
        "the container's GPU is leased to alice's app");
    assertTrue(s.committedGpuProposals() >= 1, "committed through the lease gate");

    MBeanServer mbs = ManagementFactory.getPlatformMBeanServer();
    Set<ObjectName> found = mbs.queryNames(new ObjectName(METRICS), null);
    assertEquals(1, found.size(), METRICS + " registered: " + found);
    ObjectName bean = found.iterator().next();
    // (JMX values are a snapshot cached up to the metrics period: poll)
    ThemisMiniCluster.waitFor("metrics show the round and the lease", 30_000,
        () -> num(mbs, bean, "Rounds") >= 1 && num(mbs, bean, "GpusLeased") == 1);
    assertEquals(4, num(mbs, bean, "GpusTotal"));
    am.finish();
    ThemisMiniCluster.waitFor(id + " completed", 30_000, app::isAppInCompletedStates);
    yc.stop();
  }

  /**
   * bob cannot submit to alice's queue: refused by the RM's queue ACL check with an
   * AccessControlException naming the queue; he can submit to his own (so the refusal is the
   * ACL, not his login). A caller without Kerberos credentials is not let in at all.
   */
  @Test
  void bobIsRefusedAliceQueueByItsSubmitAcl() throws Exception {
    YarnClient yc = client(bob);
    Exception e = assertThrows(Exception.class, () -> submit(bob, yc, "bob-in-alice", "alice"));
    String all = chain(e);
    System.out.println("bob submitting to queue alice: " + all);
    assertTrue(all.contains("AccessControlException"), all);
    assertTrue(all.contains("User bob") && all.contains("permission to submit")
        && all.contains("to queue alice"), all);
    for (RMApp a : mc.cluster.getResourceManager().getRMContext().getRMApps().values()) {
      assertTrue(!a.getUser().equals("bob") || !a.getQueue().endsWith("alice"),
          "bob's app in alice's queue: " + a.getApplicationId() + " " + a.getState());
    }

    ApplicationId own = submit(bob, yc, "bob-in-bob", "bob");
    assertEquals("bob", rmApp(own).getUser());
    assertTrue(rmApp(own).getQueue().endsWith("bob"));
    bob.doAs((PrivilegedExceptionAction<Void>) () -> {
      yc.killApplication(own); // his own app: allowed
      return null;
    });
    awaitState(own, RMAppState.KILLED);
    yc.stop();

    // no Kerberos credentials: SASL finds no method the RM accepts (TOKEN, KERBEROS)
    UserGroupInformation mallory = UserGroupInformation.createRemoteUser("mallory");
    YarnConfiguration quick = new YarnConfiguration(mc.cluster.getConfig());
    // (YarnClient retries local IOExceptions, this one too, for 15 minutes by default)
    quick.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_MAX_WAIT_MS, 1000);
    quick.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_RETRY_INTERVAL_MS, 250);
    YarnClient anon = client(mallory, quick);
    Exception refused = assertThrows(Exception.class, () -> mallory.doAs(
        (PrivilegedExceptionAction<Object>) anon::getApplications));
    System.out.println("unauthenticated caller: " + chain(refused));
    assertTrue(chain(refused).contains("Client cannot authenticate via"), chain(refused));
    anon.stop();
  }

  /** MODIFY_APP: bob cannot kill alice's app; admin (yarn.admin.acl) can. */
  @Test
  void bobCannotKillAlicesAppAdminCan() throws Exception {
    YarnClient ya = client(alice);
    ApplicationId id = submit(alice, ya, "alice-to-kill", "alice");
    RMApp app = rmApp(id);

    YarnClient yb = client(bob);
    Exception e = assertThrows(Exception.class, () -> bob.doAs(
        (PrivilegedExceptionAction<Void>) () -> {
          yb.killApplication(id);
          return null;
        }));
    String all = chain(e);
    System.out.println("bob killing " + id + ": " + all);
    assertTrue(all.contains("AccessControlException") && all.contains("User bob")
        && all.contains("MODIFY_APP") && all.contains(id.toString()), all);
    Thread.sleep(500);
    assertTrue(!app.isAppInCompletedStates(), "bob's kill had no effect: " + app.getState());
    yb.stop();

    YarnClient yadmin = client(admin);
    admin.doAs((PrivilegedExceptionAction<Void>) () -> {
      yadmin.killApplication(id);
      return null;
    });
    awaitState(id, RMAppState.KILLED);
    assertEquals(YarnApplicationState.KILLED,
        ya.getApplicationReport(id).getYarnApplicationState(), "alice sees her app killed");
    yadmin.stop();
    ya.stop();
  }

  /**
   * The agents' endpoint's registration check (as AmTokenIT, now in a kerberized RM): only
   * the running AM's own AMRMToken registers its app.
   */
  @Test
  void agentsEndpointStillChecksTheAmRmToken() throws Exception {
    YarnClient ya = client(alice);
    YarnClient yb = client(bob);
    ApplicationId a = submit(alice, ya, "alice-agent", "alice");
    ApplicationId b = submit(bob, yb, "bob-agent", "bob");
    SecureAm amA = SecureAm.register(a);
    SecureAm amB = SecureAm.register(b);
    ThemisRuntime rt = mc.scheduler().runtime();

    assertOk(rt.agents().verifyAmToken(a.toString(), amA.encodedToken));
    assertOk(rt.agents().verifyAmToken(b.toString(), amB.encodedToken));
    assertRefused(rt.agents().verifyAmToken(a.toString(), amB.encodedToken),
        "another application");
    assertRefused(rt.agents().verifyAmToken(a.toString(), ""), "missing registration token");
    Token<AMRMTokenIdentifier> mine = decode(amA.encodedToken);
    Token<AMRMTokenIdentifier> forged = new Token<>(mine.getIdentifier(),
        decode(amB.encodedToken).getPassword(), mine.getKind(), mine.getService());
    assertRefused(rt.agents().verifyAmToken(a.toString(), forged.encodeToUrlString()),
        "wrong registration token");

    amA.finish();
    RMApp appA = rmApp(a);
    ThemisMiniCluster.waitFor(a + " completed", 30_000, appA::isAppInCompletedStates);
    assertRefused(rt.agents().verifyAmToken(a.toString(), amA.encodedToken), "has finished");
    amB.finish();
    ya.stop();
    yb.stop();
  }

  // ------------------------------------------------------------------ helpers

  private static File keytab(String name, String... principals) throws Exception {
    File f = workDir.resolve(name + ".keytab").toFile();
    kdc.createPrincipal(f, principals);
    return f;
  }

  /** A Kerberos login of {@code user} from a keytab of its own (the JVM's login user stays). */
  private static UserGroupInformation login(String user) throws Exception {
    File kt = keytab(user, user);
    UserGroupInformation ugi = UserGroupInformation.loginUserFromKeytabAndReturnUGI(
        user + "@" + kdc.getRealm(), kt.getAbsolutePath());
    assertEquals(user, ugi.getShortUserName());
    return ugi;
  }

  /** A YarnClient whose RPC connection to the RM authenticates as {@code ugi}. */
  private static YarnClient client(UserGroupInformation ugi) throws Exception {
    return client(ugi, new YarnConfiguration(mc.cluster.getConfig()));
  }

  private static YarnClient client(UserGroupInformation ugi, YarnConfiguration conf)
      throws Exception {
    return ugi.doAs((PrivilegedExceptionAction<YarnClient>) () -> {
      YarnClient yc = YarnClient.createYarnClient();
      yc.init(conf);
      yc.start();
      return yc;
    });
  }

  /** Submits an unmanaged AM as {@code ugi} to {@code queue} (TestAm's context). */
  private static ApplicationId submit(UserGroupInformation ugi, YarnClient yc, String name,
      String queue) throws Exception {
    return ugi.doAs((PrivilegedExceptionAction<ApplicationId>) () ->
        yc.submitApplication(TestAm.unmanaged(yc.createApplication(), name, queue)));
  }

  private static void awaitState(ApplicationId id, RMAppState state) throws InterruptedException {
    RMApp app = rmApp(id);
    ThemisMiniCluster.waitFor(id + " " + state, 15_000, () -> app.getState() == state);
  }

  private static RMApp rmApp(ApplicationId id) {
    RMApp app = mc.cluster.getResourceManager().getRMContext().getRMApps().get(id);
    assertNotNull(app, id + " unknown to the RM");
    return app;
  }

  /** Messages and class names of {@code t} and its causes, one string. */
  private static String chain(Throwable t) {
    StringBuilder sb = new StringBuilder();
    for (Throwable c = t; c != null; c = c.getCause()) {
      sb.append(c.getClass().getName()).append(": ").append(c.getMessage()).append(" | ");
    }
    return sb.toString();
  }

  private static long num(MBeanServer mbs, ObjectName name, String attr) {
    try {
      return ((Number) mbs.getAttribute(name, attr)).longValue();
    } catch (javax.management.JMException e) {
      throw new AssertionError("cannot read " + attr + " of " + name + ": " + e, e);
    }
  }

  /**
   * An unmanaged AM of a kerberized cluster: it speaks the AM-RM protocol with its AMRMToken
   * alone (SASL DIGEST-MD5), under a UGI without Kerberos credentials. The token is taken from
   * the RM's attempt, as TestAm does: the application report does not carry it here (YARN
   * hands it out when the caller's user name equals the app's user, and with Kerberos the
   * caller's is the full principal, alice@EXAMPLE.COM, the app's the short name, alice).
   */
  private static final class SecureAm {
    final ApplicationId appId;
    final UserGroupInformation ugi;
    final AMRMClient<ContainerRequest> amrm;
    final String encodedToken;

    private SecureAm(ApplicationId appId, UserGroupInformation ugi,
        AMRMClient<ContainerRequest> amrm, String encodedToken) {
      this.appId = appId;
      this.ugi = ugi;
      this.amrm = amrm;
      this.encodedToken = encodedToken;
    }

    static SecureAm register(ApplicationId id) throws Exception {
      RMApp rmApp = rmApp(id);
      ThemisMiniCluster.waitFor("AM attempt of " + id + " launched", 30_000, () -> {
        RMAppAttempt a = rmApp.getCurrentAppAttempt();
        return a != null && a.getAppAttemptState() == RMAppAttemptState.LAUNCHED;
      });
      Token<AMRMTokenIdentifier> token = rmApp.getCurrentAppAttempt().getAMRMToken();
      token.setService(ClientRMProxy.getAMRMTokenService(mc.cluster.getConfig()));
      UserGroupInformation ugi = UserGroupInformation.createRemoteUser(
          rmApp.getCurrentAppAttempt().getAppAttemptId().toString());
      ugi.addToken(token);
      AMRMClient<ContainerRequest> amrm = ugi.doAs(
          (PrivilegedExceptionAction<AMRMClient<ContainerRequest>>) () -> {
            AMRMClient<ContainerRequest> cl = AMRMClient.createAMRMClient();
            cl.init(new YarnConfiguration(mc.cluster.getConfig()));
            cl.start();
            cl.registerApplicationMaster("localhost", 0, "");
            return cl;
          });
      return new SecureAm(id, ugi, amrm, token.encodeToUrlString());
    }

    void ask(int n, int gpusEach) {
      Resource r = Resource.newInstance(128, 1);
      r.setResourceValue(Gpus.GPU, gpusEach);
      for (int i = 0; i < n; i++) {
        amrm.addContainerRequest(new ContainerRequest(r, null, null, Priority.newInstance(1),
            1L, true, null));
      }
    }

    List<Container> pollUnchecked() {
      try {
        return ugi.doAs((PrivilegedExceptionAction<List<Container>>) () ->
            amrm.allocate(0.1f).getAllocatedContainers());
      } catch (IOException | InterruptedException e) {
        throw new RuntimeException(e);
      }
    }

    void finish() throws Exception {
      ugi.doAs((PrivilegedExceptionAction<Void>) () -> {
        amrm.unregisterApplicationMaster(FinalApplicationStatus.SUCCEEDED, "", "");
        amrm.stop();
        return null;
      });
    }
  }
}
