package org.themis.yarn.round;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.Collections;
import java.util.Set;
import org.apache.hadoop.yarn.api.records.NodeLabel;
import org.junit.jupiter.api.Test;

/** Which node partitions an app's partition may use (Partitions.mayUse, YARN's rule). */
class PartitionsTest {
  /** The cluster's labels: gpu exclusive, shared non-exclusive (the one that lends). */
  private static Set<String> labels() {
    return Collections.singleton("shared");
  }

  @Test
  void ownPartitionAlways() {
    assertTrue(Partitions.mayUse("", "", labels()));
    assertTrue(Partitions.mayUse("gpu", "gpu", labels()));
    assertTrue(Partitions.mayUse("shared", "shared", labels()));
    assertTrue(Partitions.mayUse("unlisted", "unlisted", labels()));
  }

  @Test
  void defaultAppsMayUseNonExclusivePartitionsOnly() {
    assertTrue(Partitions.mayUse("", "shared", labels()));
    assertFalse(Partitions.mayUse("", "gpu", labels()));
    assertFalse(Partitions.mayUse("", "unlisted", labels()), "an unlisted label is exclusive");
  }

  @Test
  void labeledAppsNeverLeaveTheirPartition() {
    assertFalse(Partitions.mayUse("gpu", "", labels()));
    assertFalse(Partitions.mayUse("gpu", "shared", labels()));
    assertFalse(Partitions.mayUse("shared", "", labels()));
    assertFalse(Partitions.mayUse("shared", "gpu", labels()));
  }

  @Test
  void nonExclusiveLabelsOfTheCluster() {
    assertEquals(labels(), Partitions.nonExclusive(Arrays.asList(
        NodeLabel.newInstance("gpu", true), NodeLabel.newInstance("shared", false))));
  }
}
