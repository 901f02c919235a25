"""gRPC contract between the arbiter and the agents (generated code in :mod:`themis.rpc.v1`)."""
