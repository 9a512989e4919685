//! Validated queue names.

use std::fmt;
use std::sync::Arc;

use crate::error::KeyError;
use crate::key::validate_name;

/// The longest queue name accepted, in bytes.
pub const MAX_QUEUE_NAME_LEN: usize = 256;

/// A validated queue name: non-empty, at most [`MAX_QUEUE_NAME_LEN`] bytes, any content.
///
/// ```
/// use redefer::queue::QueueName;
///
/// assert_eq!(QueueName::new("orders")?.as_str(), "orders");
/// assert!(QueueName::new("").is_err());
/// # Ok::<(), redefer::KeyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct QueueName(Arc<str>);

impl QueueName {
    /// Validates a queue name.
    pub fn new(name: impl Into<String>) -> Result<Self, KeyError> {
        let name = name.into();
        validate_name("queue name", &name, MAX_QUEUE_NAME_LEN)?;
        Ok(QueueName(name.into()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
