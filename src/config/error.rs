//! What is wrong with a configuration.

use thiserror::Error;

use crate::error::KeyError;

/// A configuration that cannot work.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The prefix or queue name is rejected.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The configured store could not be reached ([`Config::connect`](super::Config::connect)).
    #[error(transparent)]
    Store(#[from] crate::error::StoreError),
    /// A value is out of range.
    #[error("{field}: {problem}")]
    OutOfRange {
        /// The field, in full: `section.name`, `strategy.retry.backoff.jitter`.
        field: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// The text is not a configuration: TOML syntax, an unknown field, a value of the wrong
    /// kind (the message says where).
    #[error("invalid configuration: {0}")]
    Parse(String),
    /// The file could not be read ([`Config::from_file`](super::Config::from_file)).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}
