package org.themis.yarn;

import java.io.File;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.yarn.api.ApplicationConstants;
import org.apache.hadoop.yarn.api.protocolrecords.AllocateResponse;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationReport;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerExitStatus;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.LocalResource;
import org.apache.hadoop.yarn.api.records.LocalResourceType;
import org.apache.hadoop.yarn.api.records.LocalResourceVisibility;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.URL;
import org.apache.hadoop.yarn.api.records.YarnApplicationState;
import org.apache.hadoop.yarn.client.api.AMRMClient;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.NMClient;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.client.api.YarnClientApplication;
import org.apache.hadoop.yarn.conf.YarnConfiguration;

/**
 * A stock GPU application written against YARN's client API the way DistributedShell is, and
 * knowing nothing of Themis (no agent): its AM asks N containers of K {@code yarn.io/gpu} each,
 * runs {@code sleep S} in every one, retries a container only on exit status -100 (ABORTED,
 * as DistributedShell does) and fails on any other non-zero exit (a preemption, -102,
 * included). Used by the docker test {@code tests/integration/test_stock_apps.py}.
 *
 * <pre>
 * client: java ... org.themis.yarn.StockGpuApp submit JAR CONTAINERS GPUS SLEEP_S [NAME]
 *         uploads JAR to HDFS, submits, prints the application id, waits for the end;
 *         exit 0 when the app SUCCEEDED
 * AM:     java ... org.themis.yarn.StockGpuApp am CONTAINERS GPUS SLEEP_S
 * </pre>
 *
 * The AM's final diagnostics ({@code yarn application -status}, REST) carry its timings:
 * {@code stock-gpu-app: asked=<ms> allocated=<ms after the ask> running=<ms after the ask>
 * nodes=<node:gpus,...> exits=[...]}, the time from its GPU ask to its containers
 * allocated and started.
 */
public final class StockGpuApp {
  private static final String JVM_OPTS = "-Xmx192m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "
      + "--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED "
      + "--add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED";

  private StockGpuApp() {}

  public static void main(String[] args) throws Exception {
    if (args.length == 4 && args[0].equals("am")) {
      System.exit(am(Integer.parseInt(args[1]), Integer.parseInt(args[2]),
          Integer.parseInt(args[3])));
    } else if ((args.length == 5 || args.length == 6) && args[0].equals("submit")) {
      System.exit(submit(args[1], Integer.parseInt(args[2]), Integer.parseInt(args[3]),
          Integer.parseInt(args[4]), args.length == 6 ? args[5] : "stock-gpu-app"));
    }
    System.err.println("usage: StockGpuApp submit JAR CONTAINERS GPUS SLEEP_S [NAME] | "
        + "am CONTAINERS GPUS SLEEP_S");
    System.exit(2);
  }

  private static int submit(String jar, int containers, int gpus, int sleepS, String name)
      throws Exception {
    YarnConfiguration conf = new YarnConfiguration();
    YarnClient yarn = YarnClient.createYarnClient();
    yarn.init(conf);
    yarn.start();
    YarnClientApplication app = yarn.createApplication();
    ApplicationSubmissionContext ctx = app.getApplicationSubmissionContext();
    ApplicationId id = ctx.getApplicationId();
    FileSystem fs = FileSystem.get(conf);
    Path dst = new Path(fs.getHomeDirectory(), ".stock-gpu-app/" + id + "/app.jar");
    fs.copyFromLocalFile(new Path(new File(jar).getAbsolutePath()), dst);
    FileStatus st = fs.getFileStatus(dst);
    LocalResource res = LocalResource.newInstance(URL.fromPath(fs.makeQualified(dst)),
        LocalResourceType.FILE, LocalResourceVisibility.APPLICATION, st.getLen(),
        st.getModificationTime());
    String cp = "./*" + ApplicationConstants.CLASS_PATH_SEPARATOR
        + String.join(ApplicationConstants.CLASS_PATH_SEPARATOR,
            conf.getTrimmedStrings(YarnConfiguration.YARN_APPLICATION_CLASSPATH,
                YarnConfiguration.DEFAULT_YARN_CROSS_PLATFORM_APPLICATION_CLASSPATH));
    String cmd = "java " + JVM_OPTS + " " + StockGpuApp.class.getName() + " am " + containers
        + " " + gpus + " " + sleepS + " 1>" + ApplicationConstants.LOG_DIR_EXPANSION_VAR
        + "/AppMaster.stdout 2>" + ApplicationConstants.LOG_DIR_EXPANSION_VAR
        + "/AppMaster.stderr";
    ctx.setApplicationName(name);
    ctx.setApplicationType("YARN");
    ctx.setMaxAppAttempts(1);
    ctx.setResource(Resource.newInstance(256, 1));
    ctx.setAMContainerSpec(ContainerLaunchContext.newInstance(Map.of("app.jar", res),
        Map.of("CLASSPATH", cp), List.of(cmd), null, null, null));
    yarn.submitApplication(ctx);
    System.out.println(id);
    System.out.flush();
    while (true) {
      ApplicationReport r = yarn.getApplicationReport(id);
      YarnApplicationState s = r.getYarnApplicationState();
      if (s == YarnApplicationState.FINISHED || s == YarnApplicationState.FAILED
          || s == YarnApplicationState.KILLED) {
        System.err.println(id + " " + s + "/" + r.getFinalApplicationStatus() + ": "
            + r.getDiagnostics());
        yarn.stop();
        return r.getFinalApplicationStatus() == FinalApplicationStatus.SUCCEEDED ? 0 : 1;
      }
      Thread.sleep(500);
    }
  }

  private static int am(int containers, int gpus, int sleepS) throws Exception {
    YarnConfiguration conf = new YarnConfiguration();
    AMRMClient<ContainerRequest> rm = AMRMClient.createAMRMClient();
    rm.init(conf);
    rm.start();
    rm.registerApplicationMaster("", 0, "");
    NMClient nm = NMClient.createNMClient();
    nm.init(conf);
    nm.start();
    Resource r = Resource.newInstance(128, 1);
    r.setResourceValue(Gpus.GPU, gpus);
    Priority prio = Priority.newInstance(1);
    long asked = System.currentTimeMillis();
    for (int i = 0; i < containers; i++) {
      rm.addContainerRequest(new ContainerRequest(r, null, null, prio));
    }
    long allocated = -1;
    long running = -1;
    int got = 0;
    int done = 0;
    boolean failed = false;
    List<Integer> exits = new ArrayList<>();
    Map<String, Long> nodes = new TreeMap<>();
    while (done < containers && !failed) {
      AllocateResponse resp = rm.allocate(0.5f);
      List<Container> fresh = resp.getAllocatedContainers();
      got += fresh.size();
      if (got >= containers && allocated < 0) {
        allocated = System.currentTimeMillis() - asked;
      }
      for (Container c : fresh) {
        rm.removeContainerRequest(new ContainerRequest(r, null, null, prio));
        nodes.merge(c.getNodeId().toString(), Gpus.of(c.getResource()), Long::sum);
        ContainerLaunchContext launch = ContainerLaunchContext.newInstance(Map.of(), Map.of(),
            List.of("sleep " + sleepS), Map.<String, ByteBuffer>of(), null, null);
        nm.startContainer(c, launch);
      }
      if (got >= containers && running < 0) {
        running = System.currentTimeMillis() - asked;
      }
      for (ContainerStatus s : resp.getCompletedContainersStatuses()) {
        exits.add(s.getExitStatus());
        if (s.getExitStatus() == 0) {
          done++;
        } else if (s.getExitStatus() == ContainerExitStatus.ABORTED) {
          got--; // as DistributedShell: an aborted container is asked again
          rm.addContainerRequest(new ContainerRequest(r, null, null, prio));
        } else {
          failed = true;
        }
      }
      Thread.sleep(250);
    }
    String msg = "stock-gpu-app: asked=" + asked + " allocated=" + allocated + " running="
        + running + " nodes=" + nodes + " exits=" + exits;
    System.out.println(msg);
    rm.unregisterApplicationMaster(
        failed ? FinalApplicationStatus.FAILED : FinalApplicationStatus.SUCCEEDED, msg, "");
    nm.stop();
    rm.stop();
    return failed ? 1 : 0;
  }
}
