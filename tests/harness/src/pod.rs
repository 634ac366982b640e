//! Playing the kubelet: moving a pod through its phases.

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

/// The phases a kubelet moves a bound pod to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    /// All containers started and ready.
    Running,
    /// All containers exited with 0.
    Succeeded,
    /// All containers exited, with 1.
    Failed,
}

impl PodPhase {
    fn as_str(self) -> &'static str {
        match self {
            PodPhase::Running => "Running",
            PodPhase::Succeeded => "Succeeded",
            PodPhase::Failed => "Failed",
        }
    }
}

/// How often a status write is retried when someone else wrote the pod in between.
const CONFLICT_RETRIES: usize = 5;

/// Writes the pod's status as a kubelet would for `phase`: the phase, the
/// Initialized/Ready/ContainersReady conditions (others, like PodScheduled,
/// are kept) and one status per container. Returns the stored pod.
///
/// The whole status is replaced (read, modify, write with the
/// resourceVersion read), so the server validates the transition as it would
/// a kubelet's: a container of a `restartPolicy: Never` pod that terminated
/// cannot run again.
pub async fn set_pod_phase(pods: &Api<Pod>, name: &str, phase: PodPhase) -> Result<Pod> {
    for _ in 0..CONFLICT_RETRIES {
        let mut pod = pods
            .get(name)
            .await
            .with_context(|| format!("getting pod {name}"))?;
        apply_phase(&mut pod, phase)?;
        match pods
            .replace_status(name, &PostParams::default(), &pod)
            .await
        {
            Ok(pod) => return Ok(pod),
            Err(kube::Error::Api(status)) if status.is_conflict() => continue,
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("setting pod {name} to {}", phase.as_str()));
            }
        }
    }
    bail!(
        "setting pod {name} to {}: still conflicting after {CONFLICT_RETRIES} tries",
        phase.as_str()
    )
}

fn apply_phase(pod: &mut Pod, phase: PodPhase) -> Result<()> {
    let now = Time(Timestamp::now());
    let ready = phase == PodPhase::Running;
    let state = match phase {
        PodPhase::Running => json!({ "running": { "startedAt": now } }),
        PodPhase::Succeeded | PodPhase::Failed => {
            let (code, reason) = if phase == PodPhase::Succeeded {
                (0, "Completed")
            } else {
                (1, "Error")
            };
            json!({ "terminated": { "exitCode": code, "reason": reason, "startedAt": now, "finishedAt": now } })
        }
    };
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    let container_statuses = containers
        .iter()
        .map(|c| {
            serde_json::from_value::<ContainerStatus>(json!({
                "name": c.name,
                "image": c.image.clone().unwrap_or_default(),
                "imageID": "",
                "ready": ready,
                "started": ready,
                "restartCount": 0,
                "state": state,
            }))
        })
        .collect::<Result<Vec<_>, _>>()
        .context("building container statuses")?;

    let status = pod.status.get_or_insert_default();
    status.phase = Some(phase.as_str().to_owned());
    status.start_time.get_or_insert(now.clone());
    status.container_statuses = Some(container_statuses);
    let conditions = status.conditions.get_or_insert_default();
    let kubelet_owned = ["Initialized", "Ready", "ContainersReady"];
    conditions.retain(|c| !kubelet_owned.contains(&c.type_.as_str()));
    for type_ in kubelet_owned {
        let value = if type_ == "Initialized" || ready {
            "True"
        } else {
            "False"
        };
        conditions.push(PodCondition {
            type_: type_.to_owned(),
            status: value.to_owned(),
            last_transition_time: Some(now.clone()),
            ..PodCondition::default()
        });
    }
    Ok(())
}
