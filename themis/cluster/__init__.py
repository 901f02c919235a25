"""Cluster model shared by the arbiter, the agents and the simulator."""

from themis.cluster.topology import Gpu, Locality, Topology, TopologyError, locality_of

__all__ = ["Gpu", "Locality", "Topology", "TopologyError", "locality_of"]
