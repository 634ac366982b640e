//! Errors on one line, for logs and messages.

/// An error and its sources, each once: `a: b: c`. (Errors often repeat
/// their source in their own message; kube's name only the outermost, e.g.
/// `client error (Connect)`.)
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let message = inner.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = inner.source();
    }
    text
}
