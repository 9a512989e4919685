//! How long a guard's hold lasts unless renewed, by default.

use std::time::Duration;

/// The default lock TTL: long enough for most handlers without renewal, short enough that a
/// crashed holder blocks its key only briefly.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
