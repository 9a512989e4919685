//! The identity of a job in a delay queue.

use std::fmt;
use std::sync::Arc;

use rand::RngExt;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::rules::{MAX_JOB_ID_LEN, is_job_id_byte};
use crate::error::KeyError;
use crate::token;

/// A job's identity, kept across re-deferrals and retries: 32 random hex digits, or an id of
/// the caller's of up to 128 ASCII letters, digits, `_`, `.` and `-`.
///
/// The charset is what the claim script accepts; anything else found in a queue (written by
/// another client) is buried there rather than handed to a scheduler.
///
/// ```
/// use redefer::queue::JobId;
///
/// assert_eq!(JobId::random().as_str().len(), 32);
/// assert!(JobId::new("order-42.refund").is_ok());
/// assert!(JobId::new("order 42").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(
    // Shared, not copied: a job's id goes with it to its run, its lease's renewal and its ack.
    Arc<str>,
);

impl JobId {
    /// A fresh random id (128 bits).
    pub fn random() -> Self {
        let hex = token::hex(rand::rng().random());
        match std::str::from_utf8(&hex) {
            Ok(id) => JobId(Arc::from(id)),
            Err(_) => unreachable!("hex digits are ASCII"),
        }
    }

    /// Validates an id of the caller's.
    pub fn new(id: impl Into<String>) -> Result<Self, KeyError> {
        Self::checked(&id.into())
    }

    /// An id read from a store; `None` when it is not a job id (another client wrote it).
    pub(crate) fn from_stored(id: &str) -> Option<Self> {
        Self::checked(id).ok()
    }

    /// `id` as a job id, if it follows the rules of one.
    fn checked(id: &str) -> Result<Self, KeyError> {
        crate::key::validate_name("job id", id, MAX_JOB_ID_LEN)?;
        if !id.bytes().all(is_job_id_byte) {
            return Err(KeyError::InvalidJobId { id: id.to_string() });
        }
        Ok(JobId(Arc::from(id)))
    }

    /// The job id of a key of the caller's, any UTF-8 text (a webhook's delivery id, an
    /// idempotency key): the key itself when it is made of ASCII letters, digits, `.` and `-`;
    /// otherwise every other byte (`_` included) written `_XX` in hex, so that two keys never
    /// share an id. Refused ([`KeyError::TooLong`]) when that form exceeds 128 bytes: keys of
    /// up to 42 bytes always fit, of up to 128 when plain.
    ///
    /// ```
    /// use redefer::queue::JobId;
    ///
    /// assert_eq!(JobId::from_key("delivery-7.1")?.as_str(), "delivery-7.1");
    /// assert_eq!(JobId::from_key("a/b+c=")?.as_str(), "a_2Fb_2Bc_3D");
    /// assert_eq!(JobId::from_key("é x")?.as_str(), "_C3_A9_20x");
    /// assert_ne!(JobId::from_key("a_2F")?, JobId::from_key("a/")?);
    /// assert!(JobId::from_key(&"é".repeat(100)).is_err());
    /// # Ok::<(), redefer::KeyError>(())
    /// ```
    pub fn from_key(key: &str) -> Result<Self, KeyError> {
        let plain = |byte: u8| byte != b'_' && is_job_id_byte(byte);
        let id = if key.bytes().all(plain) {
            key.to_string()
        } else {
            let mut id = String::with_capacity(key.len() * 3);
            for byte in key.bytes() {
                if plain(byte) {
                    id.push(char::from(byte));
                } else {
                    id.push_str(&format!("_{byte:02X}"));
                }
            }
            id
        };
        JobId::new(id)
    }

    /// The id as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for JobId {
    type Error = KeyError;

    fn try_from(id: String) -> Result<Self, KeyError> {
        JobId::new(id)
    }
}

impl From<JobId> for String {
    fn from(id: JobId) -> String {
        String::from(&*id.0)
    }
}

impl Serialize for JobId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for JobId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(JobIdVisitor)
    }
}

/// Reads a job id from the text a codec found, checked, into its shared form at once (an
/// envelope's id is read for every claimed job).
struct JobIdVisitor;

impl Visitor<'_> for JobIdVisitor {
    type Value = JobId;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a job id")
    }

    fn visit_str<E: de::Error>(self, id: &str) -> Result<JobId, E> {
        JobId::checked(id).map_err(E::custom)
    }

    fn visit_bytes<E: de::Error>(self, id: &[u8]) -> Result<JobId, E> {
        let id = std::str::from_utf8(id).map_err(E::custom)?;
        self.visit_str(id)
    }
}
