//! What the index keeps of a `PodGroup` (a gang).

use wasmgpu_api::{GangReservation, PodGroup};

/// What the index keeps of a PodGroup.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct GangFacts {
    pub min_member: u32,
    pub schedule_timeout_seconds: Option<u32>,
    /// Bindings of a round being applied (see [`GangReservation`]).
    pub reservation: Option<GangReservation>,
}

impl GangFacts {
    pub fn of(group: &PodGroup) -> Self {
        GangFacts {
            min_member: u32::try_from(group.spec.min_member).unwrap_or(0).max(1),
            schedule_timeout_seconds: group
                .spec
                .schedule_timeout_seconds
                .and_then(|s| u32::try_from(s).ok()),
            reservation: GangReservation::from_annotations(group.metadata.annotations.as_ref()),
        }
    }
}
