//! Buckets: physically separate storage areas (DESIGN.md: canary and stable policies write
//! to different ones). A bucket's name becomes a path segment (`bucket=<name>`), so it is
//! checked once, where a [`Bucket`] is made, and never again.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A checked bucket name: letters, digits, `-` and `_`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Bucket(String);

/// A bucket name that cannot be one, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bucket {0:?}: use letters, digits, '-' and '_' (it names a directory)")]
pub struct InvalidBucket(pub String);

/// Characters allowed in a bucket name.
pub fn bucket_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

impl Bucket {
    /// Checks `name`.
    ///
    /// # Errors
    /// [`InvalidBucket`] for an empty name or one with other characters.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidBucket> {
        let name = name.into();
        if name.is_empty() || !name.chars().all(bucket_char) {
            return Err(InvalidBucket(name));
        }
        Ok(Bucket(name))
    }

    /// Where training runs record their samples by default.
    pub fn train() -> Self {
        Bucket("train".into())
    }

    /// Where a canary release's samples go.
    pub fn canary() -> Self {
        Bucket("canary".into())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Bucket {
    fn default() -> Self {
        Bucket::train()
    }
}

impl fmt::Display for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, not `write_str`: a table's `{:<10}` must widen a bucket like a string.
        f.pad(&self.0)
    }
}

impl std::ops::Deref for Bucket {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Bucket {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Bucket {
    type Error = InvalidBucket;
    fn try_from(name: String) -> Result<Self, InvalidBucket> {
        Bucket::new(name)
    }
}

impl std::str::FromStr for Bucket {
    type Err = InvalidBucket;
    fn from_str(name: &str) -> Result<Self, InvalidBucket> {
        Bucket::new(name)
    }
}

impl From<Bucket> for String {
    fn from(b: Bucket) -> String {
        b.0
    }
}

impl PartialEq<str> for Bucket {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Bucket {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_pads_like_a_string_in_a_table() {
        assert_eq!(format!("{:<8}|", Bucket::train()), "train   |");
        assert_eq!(format!("{:>8}|", Bucket::train()), "   train|");
    }

    #[test]
    fn names_are_checked_once_where_made() {
        assert_eq!(Bucket::new("canary-2").unwrap(), "canary-2");
        for bad in ["", "a/b", "..", "x y", "é"] {
            assert_eq!(Bucket::new(bad), Err(InvalidBucket(bad.into())), "{bad:?}");
        }
        let back: Bucket = serde_json::from_str("\"train\"").unwrap();
        assert_eq!(back, Bucket::train());
        let err = serde_json::from_str::<Bucket>("\"../x\"").unwrap_err();
        assert!(err.to_string().contains("use letters"), "{err}");
    }
}
