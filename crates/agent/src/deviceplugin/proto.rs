//! The kubelet device plugin API (`v1beta1`), generated at build time from
//! the pinned `crates/agent/proto/deviceplugin/v1beta1/api.proto`.

#![allow(missing_docs, clippy::all, clippy::pedantic)]

tonic::include_proto!("v1beta1");

/// The API version a plugin registers with.
pub const VERSION: &str = "v1beta1";
/// `Device.health` of a usable device.
pub const HEALTHY: &str = "Healthy";
/// `Device.health` of a device the kubelet must not hand out.
pub const UNHEALTHY: &str = "Unhealthy";
