//! The identity of a job in a delay queue.

use std::fmt;

use rand::RngExt;
use serde::{Deserialize, Serialize};

/// A job's identity: 32 random hex digits, kept across re-deferrals and retries.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(String);

impl JobId {
    /// A fresh random id (128 bits).
    pub fn random() -> Self {
        JobId(format!("{:032x}", rand::rng().random::<u128>()))
    }

    /// The id as stored in Redis.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for JobId {
    /// Takes a given id as it is: an id read back from Redis or chosen by the caller.
    fn from(id: String) -> Self {
        JobId(id)
    }
}
