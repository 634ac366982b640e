//! Test harness for the local control plane (see tests/control-plane).
