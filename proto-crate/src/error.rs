//! The error of a wire -> domain conversion.

/// A message from the wire could not be turned into a domain type.
///
/// Servers answer it with `INVALID_ARGUMENT`; clients treat it as a protocol
/// violation by the peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A field the domain type requires was absent (proto3 message fields are optional on the wire).
    #[error("required field `{0}` is missing")]
    MissingField(&'static str),
    /// A field was present but its value is outside the domain type's range.
    #[error("field `{field}` is invalid: {reason}")]
    InvalidField {
        /// Name of the offending field.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },
}
