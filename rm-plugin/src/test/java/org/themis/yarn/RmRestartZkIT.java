package org.themis.yarn;

import java.io.File;
import java.nio.file.Files;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.resourcemanager.recovery.ZKRMStateStore;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.themis.yarn.lease.LeaseStores;
import org.themis.yarn.lease.ZkLeaseStore;

/**
 * {@link RmRestartIT}'s restarts with the RM's state in ZooKeeper (ZKRMStateStore) and the
 * leases in a ZooKeeper node next to it, on a real ZooKeeper server.
 */
class RmRestartZkIT extends RmRestartIT {
  private static ZkTestServer zk;

  @BeforeAll
  static void up() throws Exception {
    zk = new ZkTestServer();
    File dir = Files.createTempDirectory("themis-restart-zk").toFile();
    YarnConfiguration conf = restartConf(dir);
    useZk(conf, zk.address(), "restart-zk");
    start("themis-restart-zk", conf, "zookeeper ");
    check = new ZkLeaseStore(conf, zk.address(),
        LeaseStores.zkPath(conf, ThemisSettings.from(conf)));
  }

  /** The RM's state (ZKRMStateStore) and the leases in ZooKeeper at {@code zkAddress}. */
  static void useZk(YarnConfiguration conf, String zkAddress, String clusterId) {
    conf.set(YarnConfiguration.RM_STORE, ZKRMStateStore.class.getName());
    conf.set(ZkLeaseStore.ZK_ADDRESS, zkAddress);
    conf.set(YarnConfiguration.RM_CLUSTER_ID, clusterId);
  }

  @AfterAll
  static void down() throws Exception {
    RmRestartIT.down();
    if (zk != null) {
      zk.close();
    }
  }
}
