package org.themis.yarn.lease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.junit.jupiter.api.Test;
import org.themis.yarn.ThemisSettings;

/** The restart settings and how the lease store follows the RM's own state store. */
class RecoverySettingsTest {
  private static final String PKG = "org.apache.hadoop.yarn.server.resourcemanager.recovery.";

  private static Configuration conf(String... kv) {
    Configuration c = new Configuration(false);
    for (int i = 0; i < kv.length; i += 2) {
      c.set(kv[i], kv[i + 1]);
    }
    return c;
  }

  @Test
  void defaults() {
    ThemisSettings s = ThemisSettings.from(conf());
    assertEquals("auto", s.leaseStore());
    assertEquals("", s.leaseStoreFsUri());
    assertEquals("/themis", s.leaseStoreZkPath());
    assertEquals(60_000L, s.recoverySettleMs());
  }

  @Test
  void badValuesNameTheKey() {
    String[][] bad = {
        {ThemisSettings.LEASE_STORE, "hdfs", "must be auto, zk, fs or none"},
        {ThemisSettings.LEASE_STORE_ZK_PATH, "themis", "absolute ZooKeeper path"},
        {ThemisSettings.LEASE_STORE_ZK_PATH, "/themis/", "absolute ZooKeeper path"},
        {ThemisSettings.RECOVERY_SETTLE_MS, "-1", "must be >= 0"},
        {ThemisSettings.RECOVERY_SETTLE_MS, "soon", "not an integer"},
    };
    for (String[] b : bad) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
          () -> ThemisSettings.from(conf(b[0], b[1])));
      assertTrue(e.getMessage().contains(b[0]) && e.getMessage().contains("'" + b[1] + "'")
          && e.getMessage().contains(b[2]), e.getMessage());
    }
    assertEquals("", ThemisSettings.from(conf(ThemisSettings.LEASE_STORE_ZK_PATH, "/"))
        .leaseStoreZkPath());
    assertEquals("zk", ThemisSettings.from(conf(ThemisSettings.LEASE_STORE, " ZK "))
        .leaseStore());
  }

  private static String kind(Configuration c) {
    return LeaseStores.kind(c, ThemisSettings.from(c));
  }

  @Test
  void theStoreFollowsTheRmStateStoreAndNothingIsStoredWithoutRecovery() {
    String on = YarnConfiguration.RECOVERY_ENABLED;
    String cls = YarnConfiguration.RM_STORE;
    assertEquals("none", kind(conf()));
    assertEquals("none", kind(conf(cls, PKG + "ZKRMStateStore")));
    assertEquals("none", kind(conf(ThemisSettings.LEASE_STORE, "zk")), "recovery off");
    assertEquals("fs", kind(conf(on, "true")), "FileSystemRMStateStore is the RM's default");
    assertEquals("zk", kind(conf(on, "true", cls, PKG + "ZKRMStateStore")));
    assertEquals("fs", kind(conf(on, "true", cls, PKG + "FileSystemRMStateStore")));
    assertEquals("fs", kind(conf(on, "true", cls, PKG + "LeveldbRMStateStore")));
    assertEquals("none", kind(conf(on, "true", cls, PKG + "MemoryRMStateStore")));
    assertEquals("none", kind(conf(on, "true", cls, PKG + "NullRMStateStore")));
    assertEquals("fs", kind(conf(on, "true", cls, PKG + "ZKRMStateStore",
        ThemisSettings.LEASE_STORE, "fs")));
    assertEquals("none", kind(conf(on, "true", ThemisSettings.LEASE_STORE, "none")));
  }

  @Test
  void whereTheStoreLives() {
    Configuration fs = conf(YarnConfiguration.FS_RM_STATE_STORE_URI, "hdfs://nn:8020/rmstore");
    assertEquals("hdfs://nn:8020/rmstore/themis",
        LeaseStores.fsDir(fs, ThemisSettings.from(fs)).toString());
    Configuration ldb = conf(YarnConfiguration.RM_STORE, PKG + "LeveldbRMStateStore",
        YarnConfiguration.RM_LEVELDB_STORE_PATH, "/var/yarn/rmstore");
    assertEquals("file:/var/yarn/themis",
        LeaseStores.fsDir(ldb, ThemisSettings.from(ldb)).toString());
    Configuration own = conf(ThemisSettings.LEASE_STORE_FS_URI, "file:///data/themis");
    assertEquals("file:/data/themis", LeaseStores.fsDir(own, ThemisSettings.from(own))
        .toString());
    Configuration zk = conf();
    assertEquals("/themis/yarn_cluster/leases", LeaseStores.zkPath(zk, ThemisSettings.from(zk)));
    Configuration zk2 = conf(YarnConfiguration.RM_CLUSTER_ID, "prod",
        ThemisSettings.LEASE_STORE_ZK_PATH, "/a/b");
    assertEquals("/a/b/prod/leases", LeaseStores.zkPath(zk2, ThemisSettings.from(zk2)));
  }

  @Test
  void zookeeperWithoutAnAddressIsRefusedByName() throws Exception {
    Configuration c = conf(YarnConfiguration.RECOVERY_ENABLED, "true",
        YarnConfiguration.RM_STORE, PKG + "ZKRMStateStore");
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> LeaseStores.open(c, ThemisSettings.from(c)));
    assertTrue(e.getMessage().contains("hadoop.zk.address"), e.getMessage());
    assertNull(LeaseStores.open(conf(), ThemisSettings.from(conf())));
  }
}
