package org.themis.yarn.lease;

import java.io.IOException;
import java.util.List;
import org.apache.curator.framework.CuratorFramework;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.util.curator.ZKCuratorManager;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.data.ACL;
import org.apache.zookeeper.data.Stat;

/**
 * Leases in one ZooKeeper node ({@code <lease-store.zk-path>/<cluster-id>/leases}), on the
 * ensemble of {@code hadoop.zk.address} with its ACLs and auths ({@code hadoop.zk.acl},
 * {@code hadoop.zk.auth}), as ZKRMStateStore does. Fencing by the node's version: {@link #load}
 * claims the node (rewrites it, bumping the version), and every save expects the version of
 * this store's last write, so an RM that lost the active role and still writes is refused
 * ({@link LeaseStore.Fenced}) once the new active has loaded. The document must stay under
 * ZooKeeper's node size limit ({@code jute.maxbuffer}, 1 MB: about 5000 leases).
 */
public final class ZkLeaseStore implements LeaseStore {
  /** The ZooKeeper ensemble the store uses, as ZKRMStateStore (ZKCuratorManager reads it). */
  public static final String ZK_ADDRESS = "hadoop.zk.address";
  private static final int CLAIM_ATTEMPTS = 5;
  private final ZKCuratorManager zk;
  private final CuratorFramework curator;
  private final String path;
  private final String address;
  private final List<ACL> acl;
  /** Version of the node as this store last wrote or claimed it; -1 before {@link #load}. */
  private int version = -1;

  public ZkLeaseStore(Configuration conf, String address, String path) throws IOException {
    this.address = address;
    this.path = path;
    this.acl = ZKCuratorManager.getZKAcls(conf);
    // start() reads hadoop.zk.address (start(String) is missing before Hadoop 3.4)
    Configuration c = new Configuration(conf);
    c.set(ZK_ADDRESS, address);
    this.zk = new ZKCuratorManager(c);
    zk.start();
    this.curator = zk.getCurator();
  }

  @Override
  public synchronized StoredLeases load() throws IOException {
    try {
      String parent = path.substring(0, path.lastIndexOf('/'));
      if (!parent.isEmpty()) {
        zk.createRootDirRecursively(parent, acl);
      }
      for (int attempt = 0; attempt < CLAIM_ATTEMPTS; attempt++) {
        Stat stat = new Stat();
        byte[] data;
        try {
          data = curator.getData().storingStatIn(stat).forPath(path);
        } catch (KeeperException.NoNodeException e) {
          try {
            Stat created = new Stat();
            curator.create().storingStatIn(created).withMode(CreateMode.PERSISTENT)
                .withACL(acl).forPath(path, new byte[0]);
            version = created.getVersion();
            return null;
          } catch (KeeperException.NodeExistsException raced) {
            continue; // another RM created it meanwhile: read it
          }
        }
        try {
          // claim: the same bytes, one version up; an older writer's next save is refused
          version = curator.setData().withVersion(stat.getVersion()).forPath(path, data)
              .getVersion();
        } catch (KeeperException.BadVersionException raced) {
          continue; // written meanwhile: read again
        }
        return data.length == 0 ? null : StoredLeases.fromJson(data, describe());
      }
      throw new IOException("Themis lease store " + describe() + ": could not claim the node ("
          + CLAIM_ATTEMPTS + " concurrent writes in a row; is another active RM writing?)");
    } catch (IOException e) {
      throw e;
    } catch (Exception e) {
      throw new IOException("Themis lease store " + describe() + ": " + e, e);
    }
  }

  @Override
  public StoredLeases read() throws IOException {
    try {
      byte[] data = curator.getData().forPath(path);
      return data.length == 0 ? null : StoredLeases.fromJson(data, describe());
    } catch (KeeperException.NoNodeException e) {
      return null;
    } catch (IOException e) {
      throw e;
    } catch (Exception e) {
      throw new IOException("Themis lease store " + describe() + ": " + e, e);
    }
  }

  @Override
  public synchronized void save(StoredLeases leases) throws IOException {
    if (version < 0) {
      throw new IllegalStateException("save before load of " + describe());
    }
    try {
      version = curator.setData().withVersion(version).forPath(path, leases.toJson())
          .getVersion();
    } catch (KeeperException.BadVersionException | KeeperException.NoNodeException e) {
      throw new Fenced("Themis lease store " + describe() + " was written or removed by "
          + "another ResourceManager (" + e.code() + "): this one no longer writes leases");
    } catch (Exception e) {
      throw new IOException("Themis lease store " + describe() + ": " + e, e);
    }
  }

  @Override
  public String describe() {
    return "zookeeper " + address + path;
  }

  @Override
  public void close() {
    zk.close();
  }
}
