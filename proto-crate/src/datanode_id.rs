//! [`DatanodeId`]: a datanode's stable identity, a UUID (Ozone's
//! `DatanodeDetails.uuid`), kept in its data dir across restarts.

use std::fmt;
use std::str::FromStr;

use crate::ProtocolError;

/// A datanode's identity: a UUID in its canonical hyphenated lower-case
/// form (new ids are random, version 4). Parsing accepts any UUID, so ids
/// written by earlier versions stay valid.
///
/// Debug output is the quoted id, as for a `String`, so that lists of ids in
/// error messages read as they did when they were strings.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DatanodeId(String);

impl fmt::Debug for DatanodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl DatanodeId {
    /// A new random (v4) id.
    #[must_use]
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().hyphenated().to_string())
    }

    /// The id whose UUID is the 128-bit `n` (tests and tools that want
    /// readable, stable ids).
    #[must_use]
    pub fn from_u128(n: u128) -> Self {
        Self(uuid::Uuid::from_u128(n).hyphenated().to_string())
    }

    /// The canonical text form.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for DatanodeId {
    type Err = ProtocolError;

    /// Parses any UUID text form.
    ///
    /// # Errors
    /// [`ProtocolError::InvalidField`] for text that is not a UUID.
    fn from_str(s: &str) -> Result<Self, ProtocolError> {
        uuid::Uuid::parse_str(s.trim())
            .map(|u| Self(u.hyphenated().to_string()))
            .map_err(|e| ProtocolError::InvalidField {
                field: "datanode.uuid",
                reason: format!("`{s}` is not a UUID: {e}"),
            })
    }
}

impl fmt::Display for DatanodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::ops::Deref for DatanodeId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for DatanodeId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for DatanodeId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for DatanodeId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for DatanodeId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for DatanodeId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl From<DatanodeId> for String {
    fn from(id: DatanodeId) -> Self {
        id.0
    }
}
