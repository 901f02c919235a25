"""Generated from proto/themis/v1/arbiter.proto by scripts/gen-proto.sh - do not edit."""
