//! The policy's lines in the controller's log, and how it stops a round.

/// Stops the round with `message`: the message goes to the controller's log
/// and the call traps, so the controller keeps its previous policy version
/// (at load time) or applies nothing this round (at run time). Use it for
/// errors the operator must fix, such as an invalid `config.json`.
pub fn fail(message: &str) -> ! {
    log(message);
    panic!("{message}")
}

/// Writes a line to the controller's log. Natively (tests, benchmarks) the line
/// is discarded.
pub fn log(message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::bindings::log(message);
    #[cfg(not(target_arch = "wasm32"))]
    let _ = message;
}
