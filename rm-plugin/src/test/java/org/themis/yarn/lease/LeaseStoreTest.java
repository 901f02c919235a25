package org.themis.yarn.lease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The stored form of the leases, the file store, the write-through and the table's hooks. */
class LeaseStoreTest {
  private final AtomicLong now = new AtomicLong(1_000);
  private final ApplicationId a = ApplicationId.newInstance(7, 1);
  private final ApplicationId b = ApplicationId.newInstance(7, 2);
  private final NodeId n1 = NodeId.newInstance("h1", 8041);
  private final NodeId n2 = NodeId.newInstance("h2", 8041);

  @TempDir
  File tmp;

  static String key(Lease l) {
    return l.id() + "/" + l.app() + "/" + l.node() + "/" + l.gpus() + "/" + l.grantedAtMs() + "/"
        + l.expiryMs() + "/" + l.state() + "/" + l.graceDeadlineMs();
  }

  static List<String> keys(List<Lease> ls) {
    List<String> out = new ArrayList<>();
    for (Lease l : ls) {
      out.add(key(l));
    }
    Collections.sort(out);
    return out;
  }

  private StoredLeases sample() {
    List<Lease> ls = Arrays.asList(
        new Lease(3, a, n1, 2, 100, 700, Lease.State.ACTIVE, 0),
        new Lease(5, b, n2, 1, 200, 400, Lease.State.EXPIRING, 430));
    return new StoredLeases(ls, 9, new TreeSet<>(Collections.singleton(a)), 4242);
  }

  @Test
  void jsonRoundTripKeepsEveryField() throws IOException {
    StoredLeases s = sample();
    StoredLeases r = StoredLeases.fromJson(s.toJson(), "test");
    assertEquals(keys(s.leases()), keys(r.leases()));
    assertEquals(9, r.nextId());
    assertEquals(s.agentApps(), r.agentApps());
    assertEquals(4242, r.writtenMs());
  }

  @Test
  void aLeaseKeepsItsPartitionAndOldRecordsLoadInTheDefaultPartition() throws IOException {
    // docs/yarn.md, "Partitions": a lease records its node's label; records written before
    // node labels (no "partition" field) are default-partition leases, in the same version 1
    StoredLeases s = new StoredLeases(Arrays.asList(
        new Lease(3, a, n1, 2, 100, 700, Lease.State.ACTIVE, 0, "gpu"),
        new Lease(5, b, n2, 1, 200, 400, Lease.State.ACTIVE, 0)), 9,
        Collections.<ApplicationId>emptySet(), 4242);
    String json = new String(s.toJson(), StandardCharsets.UTF_8);
    assertTrue(json.contains("\"partition\":\"gpu\""), json);
    assertTrue(json.contains("\"version\":1"), json);
    List<Lease> back = StoredLeases.fromJson(s.toJson(), "test").leases();
    assertEquals("gpu", back.get(0).partition());
    assertEquals("", back.get(1).partition());
    assertEquals(s.leases(), back);
    String old = "{\"version\":1,\"written_ms\":1,\"next_id\":4,\"agent_apps\":[],"
        + "\"leases\":[{\"id\":3,\"app\":\"" + a + "\",\"node\":\"h1:8041\",\"gpus\":2,"
        + "\"granted_ms\":100,\"expiry_ms\":700,\"state\":\"ACTIVE\","
        + "\"grace_deadline_ms\":0}]}";
    Lease l = StoredLeases.fromJson(old.getBytes(StandardCharsets.UTF_8), "old").leases().get(0);
    assertEquals("", l.partition());
    assertEquals(new Lease(3, a, n1, 2, 100, 700, Lease.State.ACTIVE, 0), l);
    // the partition survives the table's changes of a lease (renewal, expiry)
    LeaseTable t = new LeaseTable(now::get);
    Lease g = t.grant(a, n1, "gpu", 2, 500);
    assertEquals("gpu", t.renew(g.id(), 1, 2_000).partition());
    assertEquals("gpu", t.adopt(b, n2, "gpu", 1, 50).partition());
    now.set(3_000);
    List<Lease> expired = t.expireDue(100);
    assertEquals(2, expired.size());
    for (Lease x : expired) {
      assertEquals("gpu", x.partition());
    }
  }

  @Test
  void aBadDocumentNamesWhereAndWhy() {
    IOException e = assertThrows(IOException.class,
        () -> StoredLeases.fromJson("{\"version\":2}".getBytes(StandardCharsets.UTF_8), "X"));
    assertTrue(e.getMessage().contains("X") && e.getMessage().contains("version 2"),
        e.getMessage());
    e = assertThrows(IOException.class,
        () -> StoredLeases.fromJson("not json".getBytes(StandardCharsets.UTF_8), "Y"));
    assertTrue(e.getMessage().contains("Y") && e.getMessage().contains("not JSON"),
        e.getMessage());
    e = assertThrows(IOException.class, () -> StoredLeases.fromJson(
        ("{\"version\":1,\"leases\":[{\"id\":1,\"app\":\"nope\",\"node\":\"h:1\",\"gpus\":1,"
            + "\"state\":\"ACTIVE\"}]}").getBytes(StandardCharsets.UTF_8), "Z"));
    assertTrue(e.getMessage().contains("Z") && e.getMessage().contains("bad record"),
        e.getMessage());
  }

  @Test
  void theFileStoreReplacesItsDocumentWhole() throws IOException {
    Path dir = new Path(new File(tmp, "a/b/themis").toURI().toString());
    FsLeaseStore store = new FsLeaseStore(new Configuration(), dir);
    assertNull(store.load(), "nothing stored yet");
    store.save(sample());
    StoredLeases r = store.load();
    assertNotNull(r);
    assertEquals(keys(sample().leases()), keys(r.leases()));
    StoredLeases empty = new StoredLeases(new ArrayList<Lease>(), 10,
        new TreeSet<ApplicationId>(), 5000);
    store.save(empty);
    assertTrue(store.read().leases().isEmpty());
    assertEquals(10, store.read().nextId());
    assertFalse(new File(tmp, "a/b/themis/leases.json.tmp").exists(), "no temporary file left");
    assertTrue(store.describe().startsWith("fs file:"), store.describe());
    Files.write(new File(tmp, "a/b/themis/leases.json").toPath(),
        "garbage".getBytes(StandardCharsets.UTF_8));
    IOException e = assertThrows(IOException.class, store::load);
    assertTrue(e.getMessage().contains("leases.json"), e.getMessage());
  }

  @Test
  void everyChangeOfTheTableIsWrittenThrough() throws Exception {
    LeaseTable t = new LeaseTable(now::get);
    FsLeaseStore store = new FsLeaseStore(new Configuration(),
        new Path(new File(tmp, "wt").toURI().toString()));
    LeaseStoreWriter w = new LeaseStoreWriter(store,
        () -> new StoredLeases(t.snapshot(), t.nextId(), new TreeSet<ApplicationId>(), now.get()));
    t.onChange(w::changed);
    w.start();
    Lease l1 = t.grant(a, n1, 2, 100);
    t.grant(b, n2, 1, 100);
    for (int i = 0; i < 50; i++) {
      t.grant(a, n2, 1, 100 + i); // a burst
    }
    assertTrue(w.flush(10_000));
    assertEquals(keys(t.snapshot()), keys(store.load().leases()));
    assertTrue(w.writes() >= 1 && w.writes() <= 52, "writes " + w.writes());
    t.shrink(a, n1, 1);
    t.removeApp(b);
    assertTrue(w.flush(10_000));
    StoredLeases r = store.load();
    assertEquals(keys(t.snapshot()), keys(r.leases()));
    assertEquals(t.nextId(), r.nextId());
    assertEquals(1, t.liveGpus(a, n1));
    assertTrue(r.leases().stream().anyMatch(x -> x.id() == l1.id() && x.gpus() == 1));
    w.stop(5000);
    assertEquals(0, w.failures());
  }

  @Test
  void theTableTellsItsListenerOfEveryChangeAndOnlyOfChanges() {
    LeaseTable t = new LeaseTable(now::get);
    AtomicInteger n = new AtomicInteger();
    t.onChange(n::incrementAndGet);
    Lease l = t.grant(a, n1, 2, 100);
    assertEquals(1, n.get());
    assertEquals(0, t.shrink(b, n1, 1));
    assertFalse(t.remove(999));
    assertEquals(0, t.removeApp(b));
    assertTrue(t.expireDue(10).isEmpty());
    assertTrue(t.removeGraceOver().isEmpty());
    assertEquals(1, n.get(), "no-op calls change nothing");
    t.renew(l.id(), 2, 1500);
    assertEquals(2, n.get());
    assertEquals(1, t.shrink(a, n1, 1));
    assertEquals(3, n.get());
    now.set(1600);
    assertEquals(1, t.expireDue(10).size());
    assertEquals(4, n.get());
    now.set(1700);
    assertEquals(1, t.removeGraceOver().size());
    assertEquals(5, n.get());
    t.adopt(b, n2, 1, 50);
    assertEquals(6, n.get());
    t.removeApp(b);
    assertEquals(7, n.get());
    t.onChange(null);
    t.grant(a, n1, 1, 10);
    assertEquals(7, n.get());
  }

  @Test
  void restoreKeepsIdsAndLaterGrantsGetNewOnes() {
    LeaseTable t = new LeaseTable(now::get);
    t.restore(sample().leases(), sample().nextId());
    assertEquals(keys(sample().leases()), keys(t.snapshot()));
    assertEquals(9, t.nextId());
    assertEquals(9, t.grant(a, n1, 1, 10).id());
    LeaseTable u = new LeaseTable(now::get);
    u.restore(sample().leases(), 1); // next id below the ids restored
    assertEquals(6, u.grant(a, n1, 1, 10).id());
    Lease adopted = u.adopt(b, n2, 2, 50); // an expiry in the past is allowed
    assertEquals(7, adopted.id());
    assertFalse(adopted.isLive(now.get()));
    assertEquals(Lease.State.ACTIVE, adopted.state());
  }
}
