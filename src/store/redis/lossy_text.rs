//! Text that redefer wrote and another tool may have replaced, read as far as it reads.

use redis::{FromRedisValue, ParsingError, Value};

use crate::guard::Waiter;

/// Text a script or a listing answers that redefer wrote but another tool may have replaced (a
/// waiter in a key's line, a bury reason, a group's name): read as far as it is UTF-8, `U+FFFD`
/// for the rest. One such value then neither fails the call that met it (an acquire that
/// handed the key to a line's member, a listing) nor hides the values beside it.
pub(crate) struct LossyText(pub(crate) String);

impl LossyText {
    /// The waiter this names; `None` for none (`''`). A member of a line that no redefer
    /// process wrote is a waiter that never comes: its reservation runs out, and it is dropped.
    pub(crate) fn waiter(self) -> Option<Waiter> {
        Waiter::from_stored(self.0)
    }
}

impl FromRedisValue for LossyText {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        let bytes = Vec::<u8>::from_redis_value(value)?;
        Ok(LossyText(match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(error) => String::from_utf8_lossy(error.as_bytes()).into_owned(),
        }))
    }
}
