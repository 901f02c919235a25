package org.themis.yarn;

import java.io.File;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import org.apache.zookeeper.server.ServerCnxnFactory;
import org.apache.zookeeper.server.ZooKeeperServer;

/** A real ZooKeeper server (ZooKeeper's own server classes) on 127.0.0.1, ephemeral port. */
public final class ZkTestServer implements AutoCloseable {
  private final ZooKeeperServer zks;
  private final ServerCnxnFactory factory;

  public ZkTestServer() throws Exception {
    File dir = Files.createTempDirectory("themis-zk").toFile();
    zks = new ZooKeeperServer(dir, dir, 2000);
    factory = ServerCnxnFactory.createFactory(new InetSocketAddress("127.0.0.1", 0), 100);
    factory.startup(zks);
  }

  public String address() {
    return "127.0.0.1:" + factory.getLocalPort();
  }

  @Override
  public void close() {
    factory.shutdown();
    zks.shutdown();
  }
}
