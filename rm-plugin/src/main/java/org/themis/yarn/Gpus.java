package org.themis.yarn;

import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.ResourceInformation;
import org.apache.hadoop.yarn.exceptions.ResourceNotFoundException;

/** Reads the countable {@code yarn.io/gpu} resource; 0 when absent. */
public final class Gpus {
  public static final String GPU = ResourceInformation.GPU_URI;

  private Gpus() {}

  public static long of(Resource r) {
    if (r == null) {
      return 0;
    }
    try {
      return r.getResourceValue(GPU);
    } catch (ResourceNotFoundException e) {
      return 0;
    }
  }
}
