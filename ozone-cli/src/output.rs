//! Writing results to stdout: text lines and JSON. A closed pipe (`ozone sh
//! key info b/k | head -1`) is not an error: the process ends quietly with
//! status 0 (see [`is_broken_pipe`]).

use std::fmt::Display;
use std::io::Write;

/// Writes `text` and a newline to stdout.
///
/// # Errors
/// Write errors (a closed pipe included: the caller's exit path treats it as
/// success).
pub fn line(text: impl Display) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()
}

/// Writes `value` as pretty JSON and a newline to stdout.
///
/// # Errors
/// As [`line()`].
pub fn json(value: &serde_json::Value) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    line(text)
}

/// Whether `e` (or a cause of it) is a write to a closed pipe: the reader
/// of our output went away, which ends the command without an error.
#[must_use]
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
