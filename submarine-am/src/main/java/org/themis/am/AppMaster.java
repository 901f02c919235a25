package org.themis.am;

import java.io.File;
import java.net.InetAddress;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.hadoop.yarn.conf.YarnConfiguration;

import py4j.GatewayServer;

/**
 * Entry point of the Themis application master container.
 *
 * <p>A thin shell: it opens a Py4J gateway on 127.0.0.1 (ephemeral port, random auth token)
 * whose entry point is an {@link AmShell} (AMRMClientAsync + NMClientAsync), then runs the
 * Python side ({@code $THEMIS_AM_PYTHON -m themis.am.launchers.yarn}, default {@code python3})
 * with {@code THEMIS_GATEWAY_PORT} / {@code THEMIS_GATEWAY_TOKEN} in its environment. All
 * scheduling logic (Hyperband, agent, profiler, checkpoint/resume) is in Python; it drives
 * the shell. The JVM exits with the Python process's status: a Python crash before
 * unregistering fails this attempt, and YARN starts another one (AM retries), which resumes
 * from the app's HDFS state.
 */
public final class AppMaster {
  private AppMaster() {}

  public static void main(String[] args) throws Exception {
    YarnConfiguration conf = new YarnConfiguration();
    AmShell shell = new AmShell(conf);
    byte[] raw = new byte[24];
    new SecureRandom().nextBytes(raw);
    StringBuilder hex = new StringBuilder(2 * raw.length);
    for (byte b : raw) {
      hex.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
    }
    String token = hex.toString();
    GatewayServer gateway = new GatewayServer.GatewayServerBuilder()
        .entryPoint(shell)
        .javaPort(0)
        .javaAddress(InetAddress.getByName("127.0.0.1"))
        .authToken(token)
        .build();
    gateway.start();
    int port = gateway.getListeningPort();
    log("Py4J gateway on 127.0.0.1:" + port);

    String python = System.getenv().getOrDefault("THEMIS_AM_PYTHON", "python3");
    List<String> cmd = new ArrayList<>(Arrays.asList(python.split("\\s+")));
    cmd.addAll(Arrays.asList("-m", "themis.am.launchers.yarn"));
    cmd.addAll(Arrays.asList(args));
    ProcessBuilder pb = new ProcessBuilder(cmd).inheritIO().directory(new File("."));
    pb.environment().put("THEMIS_GATEWAY_PORT", Integer.toString(port));
    pb.environment().put("THEMIS_GATEWAY_TOKEN", token);
    Process child = pb.start();
    log("started " + String.join(" ", cmd) + " (pid " + pid(child) + ")");

    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      if (child.isAlive()) { // container killed: give Python the SIGTERM and a moment
        child.destroy();
        try {
          child.waitFor(15, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
    }, "am-shutdown"));

    int rc = child.waitFor();
    log("python AM exited with status " + rc + (shell.isUnregistered() ? " (unregistered)" : ""));
    shell.close();
    gateway.shutdown();
    if (rc != 0 && shell.isUnregistered()) {
      rc = 0; // the app already told the RM how it ended
    }
    System.exit(rc);
  }

  /** Process.pid() on Java 9+, Java 8's UNIXProcess.pid field otherwise, else -1. */
  static long pid(Process p) {
    try {
      return ((Number) Process.class.getMethod("pid").invoke(p)).longValue();
    } catch (ReflectiveOperationException | RuntimeException e) {
      try {
        java.lang.reflect.Field f = p.getClass().getDeclaredField("pid");
        f.setAccessible(true);
        return f.getLong(p);
      } catch (ReflectiveOperationException | RuntimeException e2) {
        return -1;
      }
    }
  }

  static void log(String msg) {
    System.err.println("[themis-am-jvm] " + msg);
  }
}
