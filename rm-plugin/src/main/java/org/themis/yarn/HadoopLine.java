package org.themis.yarn;

import org.apache.hadoop.yarn.server.resourcemanager.scheduler.AppSchedulingInfo;

/**
 * What differs between the Hadoop lines the plugin supports (3.3, 3.4, 3.5), probed once on the
 * RM's classpath. The plugin's class files are the same for every line (Java 8 class files,
 * compiled and tested against each line: docs/yarn.md, "Hadoop versions"); only behaviour that
 * a line lacks is adapted here.
 */
final class HadoopLine {
  /**
   * Whether the RM takes the AppPlacementAllocator of a resource request from
   * {@code yarn.scheduler.app-placement-allocator.class} (3.4+, read by
   * {@code AppSchedulingInfo#getDefaultResourceRequestAppPlacementType}). Hadoop 3.3 has no
   * such key, only the per-app scheduling env {@code APPLICATION_PLACEMENT_TYPE_CLASS}, which
   * {@link ThemisCapacityScheduler} then sets for each new app.
   */
  static final boolean PLACEMENT_CLASS_FROM_CONF =
      hasMethod(AppSchedulingInfo.class, "getDefaultResourceRequestAppPlacementType");

  private HadoopLine() {}

  private static boolean hasMethod(Class<?> c, String name) {
    try {
      c.getMethod(name);
      return true;
    } catch (NoSuchMethodException e) {
      return false;
    }
  }
}
