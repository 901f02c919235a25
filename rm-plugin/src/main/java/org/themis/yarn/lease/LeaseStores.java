package org.themis.yarn.lease;

import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.themis.yarn.ThemisSettings;

/**
 * Picks the lease store (docs/yarn.md, "Restart and HA"): none unless
 * {@code yarn.resourcemanager.recovery.enabled}; {@code lease-store=auto} follows the RM's own
 * {@code yarn.resourcemanager.store.class}: ZKRMStateStore -> ZooKeeper, FileSystemRMStateStore
 * -> a file under its {@code fs.state-store.uri}, LeveldbRMStateStore -> a file next to its
 * directory, anything else (MemoryRMStateStore, NullRMStateStore, custom) -> none.
 */
public final class LeaseStores {
  static final String FS_STORE = "FileSystemRMStateStore";
  static final String LEVELDB_STORE = "LeveldbRMStateStore";
  static final String ZK_STORE = "ZKRMStateStore";

  private LeaseStores() {}

  public static boolean recoveryEnabled(Configuration conf) {
    return conf.getBoolean(YarnConfiguration.RECOVERY_ENABLED,
        YarnConfiguration.DEFAULT_RM_RECOVERY_ENABLED);
  }

  /** The RM state store's class name (its default when unset, as RMStateStoreFactory). */
  static String rmStoreClass(Configuration conf) {
    String cls = conf.getTrimmed(YarnConfiguration.RM_STORE);
    return cls == null || cls.isEmpty()
        ? "org.apache.hadoop.yarn.server.resourcemanager.recovery." + FS_STORE : cls;
  }

  /** zk, fs or none: the store {@code settings} and the RM's configuration ask for. */
  public static String kind(Configuration conf, ThemisSettings settings) {
    if (!recoveryEnabled(conf)) {
      return "none";
    }
    String kind = settings.leaseStore();
    if (!kind.equals("auto")) {
      return kind;
    }
    String cls = rmStoreClass(conf);
    if (cls.endsWith("." + ZK_STORE)) {
      return "zk";
    }
    if (cls.endsWith("." + FS_STORE) || cls.endsWith("." + LEVELDB_STORE)) {
      return "fs";
    }
    return "none";
  }

  /** Directory of the fs store: the setting, else next to the RM's own store. */
  public static Path fsDir(Configuration conf, ThemisSettings settings) {
    if (!settings.leaseStoreFsUri().isEmpty()) {
      return new Path(settings.leaseStoreFsUri());
    }
    if (rmStoreClass(conf).endsWith("." + LEVELDB_STORE)) {
      String db = conf.getTrimmed(YarnConfiguration.RM_LEVELDB_STORE_PATH);
      if (db == null || db.isEmpty()) {
        db = conf.get("hadoop.tmp.dir", "/tmp") + "/yarn/system/rmstore";
      }
      Path p = new Path(db);
      Path parent = p.getParent() == null ? p : p.getParent();
      return new Path("file://" + parent.toUri().getPath() + "/themis");
    }
    String uri = conf.getTrimmed(YarnConfiguration.FS_RM_STATE_STORE_URI);
    if (uri == null || uri.isEmpty()) {
      uri = conf.get("hadoop.tmp.dir", "/tmp") + "/yarn/system/rmstore";
    }
    return new Path(uri, "themis");
  }

  /** ZooKeeper node of the leases: {@code <parent-path>/<cluster-id>/leases}. */
  public static String zkPath(Configuration conf, ThemisSettings settings) {
    String cluster = conf.getTrimmed(YarnConfiguration.RM_CLUSTER_ID,
        YarnConfiguration.DEFAULT_RM_CLUSTER_ID);
    return settings.leaseStoreZkPath() + "/" + cluster + "/leases";
  }

  /** Opens the store the configuration asks for; null for none. */
  public static LeaseStore open(Configuration conf, ThemisSettings settings) throws IOException {
    String kind = kind(conf, settings);
    if (kind.equals("fs")) {
      return new FsLeaseStore(conf, fsDir(conf, settings));
    }
    if (kind.equals("zk")) {
      String address = conf.getTrimmed(ZkLeaseStore.ZK_ADDRESS);
      if (address == null || address.isEmpty()) {
        address = conf.getTrimmed(YarnConfiguration.RM_ZK_ADDRESS);
      }
      if (address == null || address.isEmpty()) {
        throw new IllegalArgumentException("Themis: " + ThemisSettings.LEASE_STORE + "="
            + settings.leaseStore() + " stores leases in ZooKeeper, but "
            + ZkLeaseStore.ZK_ADDRESS + " is not set");
      }
      return new ZkLeaseStore(conf, address, zkPath(conf, settings));
    }
    return null;
  }
}
