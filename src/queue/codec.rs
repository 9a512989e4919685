//! How envelopes become bytes in the store.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::BoxError;

/// Turns envelopes into bytes and back. [`Json`] unless told otherwise.
///
/// Decoding reads bytes from outside the process (another version of the service, another
/// tool, a corrupted write): it must fail with an error, never panic.
pub trait Codec: Clone + Send + Sync + 'static {
    /// Encodes a value.
    fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, BoxError>;
    /// Decodes a value.
    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, BoxError>;
}

/// JSON through serde_json: readable with `redis-cli`, and the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

impl Codec for Json {
    fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, BoxError> {
        Ok(serde_json::to_vec(value)?)
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, BoxError> {
        Ok(serde_json::from_slice(bytes)?)
    }
}
