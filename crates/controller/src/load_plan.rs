//! What a policy load implies, as plain data: the Event to send and the
//! status annotation to write for a version loaded or rejected. The loader
//! (`configmaps.rs`) fetches, compiles and activates; these functions only
//! word and record the outcome, so they are tested without a server.

use std::time::Duration;

use wasmgpu_api::policy::PolicyStatus;
use wasmgpu_engine::Digest;

use super::events::Reason;

/// The Event of a load: Warning when rejected.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct LoadEvent {
    /// Warning (rejected) or Normal (loaded).
    pub warning: bool,
    /// `PolicyLoaded` or `PolicyRejected`.
    pub reason: Reason,
    /// The note.
    pub note: String,
}

/// A version that loaded: `digest` (`describe()` says `version`), with the
/// config digest, shadowing `shadow_of` or deciding itself.
pub(crate) struct Loaded<'a> {
    pub digest: &'a str,
    pub version: &'a str,
    pub config_digest: Option<String>,
    pub shadow_of: Option<String>,
    pub elapsed: Duration,
    pub now: &'a str,
}

/// The Event and the status of a version that loaded.
pub(crate) fn loaded(version: Loaded<'_>) -> (LoadEvent, PolicyStatus) {
    let from = match &version.shadow_of {
        Some(primary) => {
            format!("it runs beside {primary} from its next round, compared, never applied")
        }
        None => "it decides from the next round".to_string(),
    };
    let event = LoadEvent {
        warning: false,
        reason: Reason::PolicyLoaded,
        note: format!(
            "loaded {} ({}) in {:.1?}; {from}",
            version.digest, version.version, version.elapsed
        ),
    };
    let status = PolicyStatus {
        observed: None,
        active_digest: Some(version.digest.to_owned()),
        active_version: Some(version.version.to_owned()),
        loaded_at: Some(version.now.to_owned()),
        last_digest: Some(version.digest.to_owned()),
        last_error: None,
        last_error_at: None,
        active_config_digest: version.config_digest,
        shadow_of: version.shadow_of,
    };
    (event, status)
}

/// What still decides for a policy whose new version was rejected.
pub(crate) enum StillActive<'a> {
    /// Nothing: its pods wait.
    Nothing,
    /// This version (digest, `describe()` name and version), deciding.
    Deciding { digest: &'a str, version: String },
    /// This version, as the shadow of `primary`.
    Shadowing { digest: &'a str, primary: &'a str },
}

/// A version that was rejected.
pub(crate) struct Rejected<'a> {
    /// The error's kind.
    pub kind: &'a str,
    /// The error, with its causes.
    pub message: &'a str,
    /// The digest of the component tried, when it was read.
    pub digest: Option<String>,
    pub still: StillActive<'a>,
    pub now: &'a str,
}

/// The Event, and the status changed from `previous`, of a rejected version.
pub(crate) fn rejected(
    rejected: Rejected<'_>,
    mut previous: PolicyStatus,
) -> (LoadEvent, PolicyStatus) {
    let still = match &rejected.still {
        StillActive::Shadowing { digest, primary } => {
            format!("{digest} stays active as the shadow of {primary}")
        }
        StillActive::Deciding { digest, .. } => format!("{digest} stays active"),
        StillActive::Nothing => "no version of it is active; its pods wait".to_string(),
    };
    let event = LoadEvent {
        warning: true,
        reason: Reason::PolicyRejected,
        note: format!(
            "rejected ({}): {}; {still}",
            rejected.kind, rejected.message
        ),
    };
    if previous.active_digest.is_none()
        && let StillActive::Deciding { digest, version } = rejected.still
    {
        // A `--policy` file of the same name decides.
        previous.active_digest = Some(digest.to_owned());
        previous.active_version = Some(version);
    }
    previous.last_digest = rejected.digest;
    previous.last_error = Some(rejected.message.to_owned());
    previous.last_error_at = Some(rejected.now.to_owned());
    (event, previous)
}

/// The digest of a policy's `config.json` (none when it has none).
pub(super) fn config_digest(config: &str) -> Option<String> {
    (!config.is_empty()).then(|| Digest::of(config.as_bytes()).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-12-01T10:00:00Z";

    #[test]
    fn a_loaded_version_is_active_and_says_from_when() {
        let (event, status) = loaded(Loaded {
            digest: "sha256:new",
            version: "binpack 0.1.0",
            config_digest: Some("sha256:cfg".into()),
            shadow_of: None,
            elapsed: Duration::from_millis(12),
            now: NOW,
        });
        assert_eq!(
            event,
            LoadEvent {
                warning: false,
                reason: Reason::PolicyLoaded,
                note: "loaded sha256:new (binpack 0.1.0) in 12.0ms; it decides from the next round"
                    .into()
            }
        );
        assert_eq!(status.active_digest.as_deref(), Some("sha256:new"));
        assert_eq!(status.last_digest.as_deref(), Some("sha256:new"));
        assert_eq!(status.loaded_at.as_deref(), Some(NOW));
        assert_eq!(status.last_error, None);
        assert_eq!(status.active_config_digest.as_deref(), Some("sha256:cfg"));

        let (event, status) = loaded(Loaded {
            digest: "sha256:s",
            version: "spread 0.1.0",
            config_digest: None,
            shadow_of: Some("binpack".into()),
            elapsed: Duration::from_millis(5),
            now: NOW,
        });
        assert!(
            event
                .note
                .ends_with("it runs beside binpack from its next round, compared, never applied"),
            "{}",
            event.note
        );
        assert_eq!(status.shadow_of.as_deref(), Some("binpack"));
    }

    #[test]
    fn a_rejected_version_leaves_the_active_one_and_says_which() {
        let active = PolicyStatus {
            active_digest: Some("sha256:old".into()),
            active_version: Some("binpack 0.1.0".into()),
            loaded_at: Some("2026-11-30T00:00:00Z".into()),
            ..Default::default()
        };
        let (event, status) = rejected(
            Rejected {
                kind: "canary",
                message: "the canary round failed: out of fuel",
                digest: Some("sha256:bad".into()),
                still: StillActive::Deciding {
                    digest: "sha256:old",
                    version: "binpack 0.1.0".into(),
                },
                now: NOW,
            },
            active.clone(),
        );
        assert_eq!(
            event,
            LoadEvent {
                warning: true,
                reason: Reason::PolicyRejected,
                note: "rejected (canary): the canary round failed: out of fuel; sha256:old stays active".into()
            }
        );
        // The active version and its load time stay; the rejection is recorded.
        assert_eq!(status.active_digest, active.active_digest);
        assert_eq!(status.loaded_at, active.loaded_at);
        assert_eq!(status.last_digest.as_deref(), Some("sha256:bad"));
        assert_eq!(
            status.last_error.as_deref(),
            Some("the canary round failed: out of fuel")
        );
        assert_eq!(status.last_error_at.as_deref(), Some(NOW));
    }

    #[test]
    fn with_nothing_recorded_the_version_that_decides_is_written_down() {
        // A `--policy` file decides; the ConfigMap's first version is refused.
        let (_, status) = rejected(
            Rejected {
                kind: "wrong-world",
                message: "not a policy",
                digest: None,
                still: StillActive::Deciding {
                    digest: "sha256:file",
                    version: "binpack 0.1.0".into(),
                },
                now: NOW,
            },
            PolicyStatus::default(),
        );
        assert_eq!(status.active_digest.as_deref(), Some("sha256:file"));
        assert_eq!(status.active_version.as_deref(), Some("binpack 0.1.0"));
        assert_eq!(status.last_digest, None);

        let (event, _) = rejected(
            Rejected {
                kind: "wrong-world",
                message: "not a policy",
                digest: None,
                still: StillActive::Nothing,
                now: NOW,
            },
            PolicyStatus::default(),
        );
        assert!(
            event
                .note
                .ends_with("no version of it is active; its pods wait")
        );
        let (event, _) = rejected(
            Rejected {
                kind: "wrong-world",
                message: "not a policy",
                digest: None,
                still: StillActive::Shadowing {
                    digest: "sha256:s",
                    primary: "binpack",
                },
                now: NOW,
            },
            PolicyStatus::default(),
        );
        assert!(
            event
                .note
                .ends_with("sha256:s stays active as the shadow of binpack")
        );
    }
}
