//! Bounds on what a policy hands back to the host.
//!
//! A policy's output is copied out of its memory ("lifted") into host
//! strings and vectors. Two limits keep that small whatever the policy does:
//!
//! * Before lifting, wasmtime's hostcall fuel caps the bytes one transfer
//!   may copy ([`output_budget`], proportional to the pending pods), so a
//!   list of a million decisions or a 20 MB reason fails the call as
//!   [`super::PolicyError::InvalidOutput`] without being copied. The length
//!   of the decision list is checked against the same budget before any
//!   element is read.
//! * After lifting, each reason is cut to [`REASON_BYTES`] and each name
//!   (pod, node, GPU) to [`NAME_BYTES`], with `…`, as the controller's
//!   Events cut their notes. A cut name matches no pod, node or GPU, so the
//!   validator refuses the decision; it can still be shown whole.

use wasmgpu_contract::types::{Decision, Info};

/// Longest reason kept from a `wait` or `reject` decision, in bytes.
pub const REASON_BYTES: usize = 1024;
pub use wasmgpu_contract::NAME_BYTES;
pub use wasmgpu_support::cut;
/// Lifting budget per decision a round may return, in bytes: room for a
/// pod and node name, 16 GPU UUIDs and a reason a few times
/// [`REASON_BYTES`] long (the host's copy of each list entry counts too).
pub const DECISION_BYTES: usize = 8 << 10;
/// Lifting budget for `describe()` and for each call the policy makes to
/// the host (`log`, WASI), in bytes.
pub const CALL_BYTES: usize = 256 << 10;

/// Most decisions accepted for `pending` pods: one each, a second one each
/// (refused by the validator, but not an error of the round), and a few more.
pub fn most_decisions(pending: usize) -> usize {
    pending.saturating_mul(2).saturating_add(16)
}

/// Bytes the decisions of a round with `pending` pods may take when lifted.
pub fn output_budget(pending: usize) -> usize {
    most_decisions(pending)
        .saturating_mul(DECISION_BYTES)
        .max(CALL_BYTES)
}

/// Cuts every reason of `decision` to its bound (decisions name pods, nodes
/// and GPUs by position: only reasons are text).
pub(super) fn bound_decision(decision: &mut Decision) {
    match decision {
        Decision::Assign(_) | Decision::Preempt(_) => {}
        Decision::Wait(d) | Decision::Reject(d) => cut(&mut d.reason, REASON_BYTES),
    }
}

/// The most node label keys a policy may ask for.
pub const MOST_LABEL_KEYS: usize = 32;
/// Longest label key Kubernetes allows: a 253-byte prefix, `/`, 63 bytes.
pub const LABEL_KEY_BYTES: usize = 317;

/// Cuts what `describe()` said to the same bounds, and refuses label keys
/// no node can have (too many, empty, too long, or named twice): the
/// message names the field and the bound.
pub(super) fn bound_info(info: &mut Info) -> Result<(), String> {
    cut(&mut info.name, NAME_BYTES);
    cut(&mut info.version, NAME_BYTES);
    cut(&mut info.description, REASON_BYTES);
    let keys = &info.label_keys;
    if keys.len() > MOST_LABEL_KEYS {
        return Err(format!(
            "describe() asks for {} label keys (info.label-keys); at most {MOST_LABEL_KEYS}",
            keys.len()
        ));
    }
    for (i, key) in keys.iter().enumerate() {
        if key.is_empty() || key.len() > LABEL_KEY_BYTES {
            return Err(format!(
                "info.label-keys[{i}] is {} bytes long; a label key is 1 to {LABEL_KEY_BYTES}",
                key.len()
            ));
        }
        if keys[..i].contains(key) {
            return Err(format!("info.label-keys[{i}] ({key:?}) is named twice"));
        }
    }
    Ok(())
}

/// Whether wasmtime refused to copy more than the hostcall budget.
pub(super) fn is_over_budget(error: &wasmtime::Error) -> bool {
    // wasmtime's error type for this is private; its message is stable
    // within a major version (and a test fails if it changes).
    error
        .chain()
        .any(|e| e.to_string().contains("fuel allocated for hostcalls"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgpu_contract::types::Deferral;

    #[test]
    fn reasons_and_names_are_cut_at_a_char_boundary() {
        let mut text = "é".repeat(600);
        cut(&mut text, 1023);
        assert_eq!(text.len(), 1022 + "…".len());
        assert!(text.ends_with("é…"));
        let mut short = "fits".to_string();
        cut(&mut short, 4);
        assert_eq!(short, "fits");

        let mut wait = Decision::Wait(Deferral {
            pod: 0,
            reason: "r".repeat(20 << 20),
        });
        bound_decision(&mut wait);
        let Decision::Wait(d) = &wait else {
            unreachable!()
        };
        assert_eq!(d.reason.len(), REASON_BYTES + "…".len());
    }

    #[test]
    fn label_keys_are_held_to_what_a_node_can_have() {
        let mut info = wasmgpu_contract::info("p", "1", "d");
        info.label_keys = vec!["topology.kubernetes.io/zone".into()];
        assert_eq!(bound_info(&mut info), Ok(()));
        info.label_keys.push("topology.kubernetes.io/zone".into());
        assert!(bound_info(&mut info).unwrap_err().contains("named twice"));
        info.label_keys = vec![String::new()];
        assert!(bound_info(&mut info).unwrap_err().contains("label-keys[0]"));
        info.label_keys = (0..33).map(|i| format!("k{i}")).collect();
        assert!(bound_info(&mut info).unwrap_err().contains("at most 32"));
    }

    #[test]
    fn the_budget_grows_with_the_pending_pods() {
        assert_eq!(output_budget(0), CALL_BYTES);
        assert_eq!(output_budget(1000), 2016 * DECISION_BYTES);
        assert_eq!(output_budget(usize::MAX), usize::MAX);
    }
}
