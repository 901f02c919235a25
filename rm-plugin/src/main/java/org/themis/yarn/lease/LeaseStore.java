package org.themis.yarn.lease;

import java.io.Closeable;
import java.io.IOException;

/**
 * Where the plugin's leases survive a ResourceManager restart (docs/yarn.md, "Restart and
 * HA"): one document, replaced whole on every write ({@link LeaseStoreWriter}). Chosen by
 * {@link LeaseStores#open} after the RM's own state store: {@link ZkLeaseStore} next to
 * ZKRMStateStore, {@link FsLeaseStore} next to FileSystemRMStateStore / LeveldbRMStateStore.
 */
public interface LeaseStore extends Closeable {
  /**
   * The stored leases, or null when nothing was stored yet. A store that fences (ZooKeeper)
   * takes ownership here: from then on writes of an RM that opened it earlier fail.
   */
  StoredLeases load() throws IOException;

  /** The stored leases (null when none) without taking the store over: diagnostics, tests. */
  StoredLeases read() throws IOException;

  /** Replaces the stored leases. Throws {@link Fenced} when another RM took the store over. */
  void save(StoredLeases leases) throws IOException;

  /** Where, for logs: {@code zookeeper 127.0.0.1:2181/themis/c1/leases}, {@code fs file:/...}. */
  String describe();

  /** Another ResourceManager loaded the store after this one: this one must stop writing. */
  final class Fenced extends IOException {
    private static final long serialVersionUID = 1L;

    public Fenced(String message) {
      super(message);
    }
  }
}
