//! Durations and times as the milliseconds both stores keep: scores, TTLs and leases are whole
//! milliseconds, times are milliseconds since the Unix epoch.

use std::time::{Duration, SystemTime};

/// A duration in whole milliseconds, saturating; zero stays zero (a delay of zero is "due now").
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A TTL in milliseconds: at least 1, since Redis rejects a TTL of zero.
pub(crate) fn ttl_millis(ttl: Duration) -> u64 {
    millis(ttl).max(1)
}

/// The system clock in whole microseconds since the Unix epoch (0 before it): the memory
/// store's clock where the Redis scripts read the server's `TIME` in µs.
pub(crate) fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_micros()).unwrap_or(u64::MAX))
}

/// Milliseconds since the Unix epoch as a time (the epoch itself for anything before it).
pub(crate) fn from_epoch_ms(ms: i64) -> SystemTime {
    match u64::try_from(ms) {
        Ok(ms) => SystemTime::UNIX_EPOCH + Duration::from_millis(ms),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

/// A time as milliseconds since the Unix epoch (0 before it).
pub(crate) fn to_epoch_ms(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
}

/// `duration` after the epoch time `ms`, saturating.
pub(crate) fn after_epoch_ms(ms: i64, duration: Duration) -> i64 {
    ms.saturating_add_unsigned(millis(duration))
}

/// Serializes an optional duration as whole milliseconds (`null` for none): the one shape of a
/// duration in the JSON API and the command's JSON (fields named `..._ms`).
pub(crate) fn serialize_opt_millis<S: serde::Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match duration {
        Some(duration) => serializer.serialize_some(&millis(*duration)),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_saturate_instead_of_wrapping() {
        assert_eq!(millis(Duration::ZERO), 0);
        assert_eq!(ttl_millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::MAX), u64::MAX);
        assert_eq!(after_epoch_ms(i64::MAX - 1, Duration::from_secs(1)), i64::MAX);
        assert_eq!(from_epoch_ms(-5), SystemTime::UNIX_EPOCH);
        let time = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(from_epoch_ms(to_epoch_ms(time)), time);
    }
}
