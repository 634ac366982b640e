//! How many `wasmgpu.io/gpu` a pod asks for, by the rule Kubernetes applies
//! to every extended resource.
//!
//! ```text
//!  initContainers: [ i1: 1, s1 (sidecar, restartPolicy: Always): 1, i2: 3 ]
//!  containers:     [ a: 2, b: 1 ]
//!
//!  while i1 runs:  i1                       = 1
//!  while i2 runs:  i2 + s1 (started before) = 4
//!  afterwards:     a + b + s1               = 4   → the pod holds max = 4
//! ```
//!
//! A regular init container runs alone (beside the sidecars started before
//! it) and gives its devices back when it ends: the kubelet's device manager
//! hands them to the containers after it. Sidecars (restartable init
//! containers) run beside everything that follows, like app containers. The
//! index and the device plugin both count with [`pod_gpus`], so the GPUs the
//! controller allocates are exactly the ones the kubelet asks for.

use k8s_openapi::api::core::v1::{Container, PodSpec};

/// The extended resource the node's device plugin serves.
pub const GPU_RESOURCE: &str = "wasmgpu.io/gpu";

/// One container that names `wasmgpu.io/gpu` in its limits, in the
/// kubelet's order (init containers first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerGpus {
    /// Its limit.
    pub count: u32,
    /// A regular (not restartable) init container: its devices go back to
    /// the pod when it ends, and the containers after it reuse them.
    pub gives_back: bool,
}

/// A `wasmgpu.io/gpu` limit that is not a whole number of GPUs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "container {container}: resources.limits[\"wasmgpu.io/gpu\"] is {value:?}, not a whole number \
     of GPUs; set it to a count such as \"2\""
)]
pub struct UnreadableGpuLimit {
    /// The container.
    pub container: String,
    /// The value as written.
    pub value: String,
}

/// The containers of `spec` that ask for GPUs, in the kubelet's order, with
/// their limits. A limit of 0 asks for nothing and is left out.
pub fn container_gpus(spec: &PodSpec) -> Result<Vec<ContainerGpus>, UnreadableGpuLimit> {
    let init = spec.init_containers.iter().flatten().map(|c| {
        let restartable = c.restart_policy.as_deref() == Some("Always");
        (c, !restartable)
    });
    let app = spec.containers.iter().map(|c| (c, false));
    let mut out = Vec::new();
    for (container, gives_back) in init.chain(app) {
        if let Some(count) = limit(container)?
            && count > 0
        {
            out.push(ContainerGpus { count, gives_back });
        }
    }
    Ok(out)
}

/// The GPUs a pod holds while it runs: the larger of what its long-running
/// containers (app containers and sidecars) need together, and what each
/// regular init container needs beside the sidecars started before it.
/// `None` when no container asks for GPUs.
pub fn pod_gpus(containers: &[ContainerGpus]) -> Option<u64> {
    if containers.is_empty() {
        return None;
    }
    let mut sidecars: u64 = 0;
    let mut largest_init: u64 = 0;
    let mut long_running: u64 = 0;
    for container in containers {
        let count = u64::from(container.count);
        if container.gives_back {
            largest_init = largest_init.max(sidecars.saturating_add(count));
        } else {
            long_running = long_running.saturating_add(count);
            // Only init containers are sidecars to later init containers;
            // app containers come after every init container anyway.
            sidecars = sidecars.saturating_add(count);
        }
    }
    Some(long_running.max(largest_init))
}

fn limit(container: &Container) -> Result<Option<u32>, UnreadableGpuLimit> {
    let Some(quantity) = container
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get(GPU_RESOURCE))
    else {
        return Ok(None);
    };
    quantity
        .0
        .trim()
        .parse::<u32>()
        .map(Some)
        .map_err(|_| UnreadableGpuLimit {
            container: container.name.clone(),
            value: quantity.0.clone(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn container(name: &str, gpus: Option<&str>) -> Container {
        Container {
            name: name.into(),
            resources: gpus.map(|g| ResourceRequirements {
                limits: Some([(GPU_RESOURCE.to_string(), Quantity(g.into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sidecar(name: &str, gpus: &str) -> Container {
        Container {
            restart_policy: Some("Always".into()),
            ..container(name, Some(gpus))
        }
    }

    fn spec(init: Vec<Container>, app: Vec<Container>) -> PodSpec {
        PodSpec {
            init_containers: Some(init),
            containers: app,
            ..Default::default()
        }
    }

    fn gpus(spec: &PodSpec) -> Option<u64> {
        pod_gpus(&container_gpus(spec).unwrap())
    }

    #[test]
    fn app_containers_add_up() {
        let pod = spec(
            vec![],
            vec![
                container("a", Some("2")),
                container("b", Some("1")),
                container("c", None),
            ],
        );
        assert_eq!(gpus(&pod), Some(3));
    }

    #[test]
    fn an_init_container_reuses_what_the_app_containers_get() {
        let pod = spec(
            vec![container("init", Some("2"))],
            vec![container("a", Some("2"))],
        );
        assert_eq!(gpus(&pod), Some(2), "not 4: the init container gives back");
        let larger = spec(
            vec![container("init", Some("4"))],
            vec![container("a", Some("1"))],
        );
        assert_eq!(gpus(&larger), Some(4), "the largest init container");
        let only_init = spec(
            vec![container("init", Some("1"))],
            vec![container("a", None)],
        );
        assert_eq!(gpus(&only_init), Some(1));
    }

    #[test]
    fn a_sidecar_runs_beside_everything_after_it() {
        let pod = spec(
            vec![
                container("i1", Some("1")),
                sidecar("s1", "1"),
                container("i2", Some("3")),
            ],
            vec![container("a", Some("2")), container("b", Some("1"))],
        );
        assert_eq!(gpus(&pod), Some(4), "i2 + s1 = 4 = a + b + s1");
        let wide_init = spec(
            vec![sidecar("s1", "2"), container("i", Some("3"))],
            vec![container("a", Some("1"))],
        );
        assert_eq!(gpus(&wide_init), Some(5), "i beside s1");
        let before_sidecar = spec(
            vec![container("i", Some("3")), sidecar("s1", "2")],
            vec![container("a", Some("1"))],
        );
        assert_eq!(gpus(&before_sidecar), Some(3), "i runs before s1 starts");
    }

    #[test]
    fn containers_are_listed_in_the_kubelets_order() {
        let pod = spec(
            vec![container("i", Some("1")), sidecar("s", "2")],
            vec![container("a", Some("0")), container("b", Some("3"))],
        );
        assert_eq!(
            container_gpus(&pod).unwrap(),
            [
                ContainerGpus {
                    count: 1,
                    gives_back: true
                },
                ContainerGpus {
                    count: 2,
                    gives_back: false
                },
                ContainerGpus {
                    count: 3,
                    gives_back: false
                },
            ]
        );
    }

    #[test]
    fn no_limit_asks_for_nothing_and_a_bad_one_is_named() {
        assert_eq!(gpus(&spec(vec![], vec![container("a", None)])), None);
        let bad = spec(vec![], vec![container("a", Some("1.5"))]);
        let error = container_gpus(&bad).unwrap_err();
        assert_eq!(error.container, "a");
        assert!(error.to_string().contains("not a whole number"), "{error}");
    }
}
