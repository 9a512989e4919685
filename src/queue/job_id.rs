//! The identity of a job in a delay queue.

use std::fmt;

use rand::RngExt;
use serde::{Deserialize, Serialize};

use super::rules::{MAX_JOB_ID_LEN, is_job_id_byte};
use crate::error::KeyError;

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
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobId(String);

impl JobId {
    /// A fresh random id (128 bits).
    pub fn random() -> Self {
        JobId(format!("{:032x}", rand::rng().random::<u128>()))
    }

    /// Validates an id of the caller's.
    pub fn new(id: impl Into<String>) -> Result<Self, KeyError> {
        let id = id.into();
        Self::check(&id)?;
        Ok(JobId(id))
    }

    /// An id read from a store, or the text back when it is not a job id (another client wrote
    /// it): a claim keeps the text to bury the entry, without copying every valid id first.
    pub(crate) fn from_stored(id: String) -> Result<Self, String> {
        match Self::check(&id) {
            Ok(()) => Ok(JobId(id)),
            Err(_) => Err(id),
        }
    }

    /// The rules of a job id.
    fn check(id: &str) -> Result<(), KeyError> {
        crate::key::validate_name("job id", id, MAX_JOB_ID_LEN)?;
        if !id.bytes().all(is_job_id_byte) {
            return Err(KeyError::InvalidJobId { id: id.to_string() });
        }
        Ok(())
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
        id.0
    }
}
