//! How envelopes become bytes in the store.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::BoxError;

/// Turns envelopes into bytes and back. [`Json`] unless told otherwise.
///
/// A codec of your own, for example one that encrypts, wraps another:
///
/// ```
/// use redefer::BoxError;
/// use redefer::queue::{Codec, DelayQueue, Json};
/// use redefer::MemoryStore;
///
/// /// JSON with every byte flipped: a stand-in for real encryption.
/// #[derive(Clone)]
/// struct Flipped;
///
/// impl Codec for Flipped {
///     fn encode<T: serde::Serialize>(&self, value: &T) -> Result<Vec<u8>, BoxError> {
///         Ok(Json.encode(value)?.into_iter().map(|b| !b).collect())
///     }
///     fn decode<T: serde::de::DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, BoxError> {
///         Json.decode(&bytes.iter().map(|b| !b).collect::<Vec<_>>())
///     }
/// }
///
/// let queue = DelayQueue::<String, _>::new(MemoryStore::new(), "secrets")?.codec(Flipped);
/// # let _ = queue;
/// # Ok::<(), redefer::KeyError>(())
/// ```
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
