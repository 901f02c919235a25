package org.themis.yarn.lease;

import java.io.IOException;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Writes the lease table through to a {@link LeaseStore}: every change ({@link #changed})
 * asks for a write, and one thread writes the newest snapshot, so a burst of changes makes
 * one write and a write never blocks the scheduler. Each write is a whole, consistent
 * snapshot taken after the change it answers, so what is stored is always the table as it
 * was at some moment, never older than an earlier stored one. A failed write is retried with
 * back-off (0.5 s doubling to 10 s); a fenced store (another RM took it over) stops writing.
 */
final class LeaseStoreWriter {
  private static final Logger LOG = LoggerFactory.getLogger(LeaseStoreWriter.class);
  private static final long RETRY_MIN_MS = 500;
  private static final long RETRY_MAX_MS = 10_000;

  private final LeaseStore store;
  private final Callable<StoredLeases> snapshot;
  private final AtomicLong writes = new AtomicLong();
  private final AtomicLong failures = new AtomicLong();
  /** Changes asked / written (guarded by this). */
  private long requested;
  private long written;
  private boolean stopping;
  private volatile boolean fenced;
  private Thread thread;

  LeaseStoreWriter(LeaseStore store, Callable<StoredLeases> snapshot) {
    this.store = store;
    this.snapshot = snapshot;
  }

  synchronized void start() {
    thread = new Thread(this::run, "themis-lease-store-writer");
    thread.setDaemon(true);
    thread.start();
  }

  /** The table changed: write it (soon, on the writer thread). */
  synchronized void changed() {
    requested++;
    notifyAll();
  }

  long writes() { return writes.get(); }
  long failures() { return failures.get(); }
  boolean fenced() { return fenced; }

  /** Waits until every change asked before this call is written; false on timeout. */
  synchronized boolean flush(long timeoutMs) throws InterruptedException {
    long target = requested;
    long end = System.currentTimeMillis() + timeoutMs;
    while (written < target && !fenced && thread != null && thread.isAlive()) {
      long left = end - System.currentTimeMillis();
      if (left <= 0) {
        return false;
      }
      wait(left);
    }
    return written >= target;
  }

  /** Writes what is pending (at most {@code timeoutMs}), stops the thread, closes the store. */
  void stop(long timeoutMs) {
    try {
      if (!flush(timeoutMs)) {
        LOG.warn("Themis lease store {}: last changes not written within {} ms at stop",
            store.describe(), timeoutMs);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    Thread t;
    synchronized (this) {
      stopping = true;
      notifyAll();
      t = thread;
    }
    if (t != null) {
      t.interrupt();
      try {
        t.join(5000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    try {
      store.close();
    } catch (IOException e) {
      LOG.warn("Themis lease store {}: close failed", store.describe(), e);
    }
  }

  private void run() {
    long backoff = RETRY_MIN_MS;
    while (true) {
      long target;
      synchronized (this) {
        while (!stopping && written >= requested) {
          try {
            wait();
          } catch (InterruptedException e) {
            if (stopping) {
              return;
            }
          }
        }
        if (stopping) {
          return;
        }
        target = requested;
      }
      try {
        store.save(snapshot.call());
        writes.incrementAndGet();
        backoff = RETRY_MIN_MS;
        synchronized (this) {
          written = Math.max(written, target);
          notifyAll();
        }
      } catch (LeaseStore.Fenced e) {
        fenced = true;
        LOG.error("{}", e.getMessage());
        synchronized (this) {
          notifyAll();
        }
        return;
      } catch (Exception e) {
        long n = failures.incrementAndGet();
        LOG.error("Themis lease store {}: write failed ({} failure(s) so far), retry in {} ms",
            store.describe(), n, backoff, e);
        try {
          Thread.sleep(backoff);
        } catch (InterruptedException ie) {
          synchronized (this) {
            if (stopping) {
              return;
            }
          }
        }
        backoff = Math.min(2 * backoff, RETRY_MAX_MS);
      }
    }
  }
}
