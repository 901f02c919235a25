package org.themis.yarn.lease;

import java.io.ByteArrayOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.EnumSet;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.CreateFlag;
import org.apache.hadoop.fs.FileContext;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Leases in one file, {@code <dir>/leases.json}, on any Hadoop file system (HDFS next to
 * FileSystemRMStateStore, or the local disk next to LeveldbRMStateStore). Each write goes to
 * {@code leases.json.tmp} and is renamed over the file (atomic on HDFS and local disks), so a
 * reader sees the old or the new document, never half of one. No fencing: with RM HA use
 * ZooKeeper ({@link ZkLeaseStore}).
 */
public final class FsLeaseStore implements LeaseStore {
  static final String FILE = "leases.json";
  private final FileContext fc;
  private final Path dir;
  private final Path file;
  private final Path tmp;

  public FsLeaseStore(Configuration conf, Path dir) throws IOException {
    this.fc = FileContext.getFileContext(dir.toUri(), conf);
    this.dir = fc.makeQualified(dir);
    this.file = new Path(this.dir, FILE);
    this.tmp = new Path(this.dir, FILE + ".tmp");
  }

  @Override
  public StoredLeases load() throws IOException {
    byte[] data;
    try (InputStream in = fc.open(file)) {
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      byte[] buf = new byte[8192];
      for (int n = in.read(buf); n >= 0; n = in.read(buf)) {
        out.write(buf, 0, n);
      }
      data = out.toByteArray();
    } catch (FileNotFoundException e) {
      return null;
    }
    return StoredLeases.fromJson(data, file.toString());
  }

  @Override
  public StoredLeases read() throws IOException {
    return load();
  }

  @Override
  public void save(StoredLeases leases) throws IOException {
    byte[] data = leases.toJson();
    fc.mkdir(dir, new FsPermission((short) 0700), true);
    try (OutputStream out = fc.create(tmp, EnumSet.of(CreateFlag.CREATE, CreateFlag.OVERWRITE),
        Options.CreateOpts.perms(new FsPermission((short) 0600)))) {
      out.write(data);
    }
    fc.rename(tmp, file, Options.Rename.OVERWRITE);
  }

  @Override
  public String describe() {
    return "fs " + file;
  }

  @Override
  public void close() {
    // FileContext holds no connection of its own
  }
}
