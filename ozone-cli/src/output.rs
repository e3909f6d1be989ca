//! Writing results to stdout: text lines and JSON. A closed pipe (`ozone sh
//! key info b/k | head -1`) is not an error: the process ends quietly with
//! status 0 (see [`is_broken_pipe`]).

use std::fmt::Display;
use std::io::Write;

/// A failed write to stdout. Only writes to stdout are turned into this, so a
/// broken pipe met elsewhere (a connection to a datanode, say) stays an error.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The reader of our output went away (`EPIPE`): the command ends with
    /// status 0, as `cat` and `ls` do when `head` has read enough.
    #[error("stdout was closed by its reader")]
    Closed,
    /// Any other write error on stdout (a full disk behind a redirection).
    #[error("writing to stdout: {0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for OutputError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Self::Closed
        } else {
            Self::Io(e)
        }
    }
}

/// Writes `text` and a newline to stdout.
///
/// # Errors
/// [`OutputError`] (a closed pipe included: the caller's exit path treats it
/// as success).
pub fn line(text: impl Display) -> Result<(), OutputError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    Ok(out.flush()?)
}

/// Writes `text` to stdout as it is (no newline), for output printed in pieces.
///
/// # Errors
/// As [`line()`].
pub fn raw(text: &str) -> Result<(), OutputError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    Ok(out.flush()?)
}

/// Writes `value` as pretty JSON and a newline to stdout.
///
/// # Errors
/// As [`line()`].
pub fn json(value: &serde_json::Value) -> Result<(), OutputError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| OutputError::Io(std::io::Error::other(e)))?;
    line(text)
}

/// Writes a status line (`put b/k: …`) to stderr, where it stays out of
/// output a script reads. A closed stderr has nowhere to be reported, so a
/// failed write is dropped rather than ending the command (`eprintln!` would
/// panic).
pub fn status(text: impl Display) {
    let mut err = std::io::stderr().lock();
    // Nowhere left to report a failure to write the report itself.
    let _ = writeln!(err, "{text}");
}

/// Whether `e` (or a cause of it) is [`OutputError::Closed`]: the reader of
/// our stdout went away, which ends the command without an error. A broken
/// pipe anywhere else is a failure like any other.
#[must_use]
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| matches!(c.downcast_ref::<OutputError>(), Some(OutputError::Closed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipe() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::BrokenPipe)
    }

    #[test]
    fn only_a_closed_stdout_is_a_quiet_end() {
        let stdout = anyhow::Error::from(OutputError::from(pipe())).context("listing keys");
        assert!(is_broken_pipe(&stdout));
        // A connection to a datanode that broke mid-read is a failure.
        let elsewhere = anyhow::Error::from(pipe()).context("reading b/k");
        assert!(!is_broken_pipe(&elsewhere));
        let full = anyhow::Error::from(OutputError::from(std::io::Error::from(
            std::io::ErrorKind::StorageFull,
        )));
        assert!(!is_broken_pipe(&full));
    }
}
