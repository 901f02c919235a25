package org.themis.yarn.round;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** A queue's share of the cluster's GPUs from its float absolute capacity (QueueGpus). */
class QueueGpusTest {
  @Test
  void shareIsTheFloorOfTheConfiguredPercentage() {
    assertEquals(6, QueueGpus.share(0.75f, 8));
    assertEquals(2, QueueGpus.share(0.25f, 8));
    assertEquals(8, QueueGpus.share(1.0f, 8));
    assertEquals(0, QueueGpus.share(0.0f, 8));
    // 70% is the float 0.69999999: still 7 of 10 GPUs, and 179 of 256
    assertEquals(7, QueueGpus.share(0.7f, 10));
    assertEquals(179, QueueGpus.share(0.7f, 256));
    assertEquals(1365, QueueGpus.share(1f / 3f, 4096));
    assertEquals(0, QueueGpus.share(0.3f, 3));
  }
}
