//! How long each kind of Redis key lives: the rule that keeps a store's footprint bounded by
//! what is in use, not by every key ever used.
//!
//! A key made for one lock key (its fencing counter, its line, its last hold, ...) lives while
//! something needs it and at most [`IDLE_KEY_TTL`] after its last use; a queue's keys live with
//! the queue (tens of keys, however many jobs passed). The guide's key tables say the same per
//! key (a test in `redis/keys.rs` reads them against [`lifetime_of`]), the Lua scripts set it
//! (`IDLE_MS` of `lua/fence.lua`), and [`RedisStore::footprint`](super::RedisStore::footprint)
//! counts what a prefix holds by kind.

use std::fmt;
use std::time::Duration;

/// How long a key made for one lock key lives after its last use: a minute.
///
/// Why a minute: long enough that a key in steady use never expires (a waiter comes back to
/// its line within its fallback, 10 s at most; the `retry_after` estimate of a key released in
/// the last minute is still known), short enough that a service that touches each of millions
/// of keys once holds only the last minute's. A fencing counter that expires is raised to the
/// server's clock in microseconds when next used, above every token it gave unless the server's
/// clock went back by more than a minute in between (see the guide's lock chapter, "Tokens survive a lost
/// counter").
pub const IDLE_KEY_TTL: Duration = Duration::from_secs(60);

/// How long one kind of key lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lifetime {
    /// While held: the holding's TTL (renewed while its handler runs).
    WhileHeld,
    /// [`IDLE_KEY_TTL`] after its last use.
    Idle,
    /// Until the last deadline it holds (a permit's lease, a throttle slot, a booking), plus a
    /// bounded margin.
    UntilLastDeadline,
    /// A running request's record ends with its run (its lock's TTL, renewed while it runs); a
    /// finished one is kept for the layer's retention.
    RequestRecord,
    /// With the queue, or the registry: one key per queue, whatever passed through it.
    WithQueue,
    /// Not a key: a pub/sub channel.
    Channel,
}

impl fmt::Display for Lifetime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Lifetime::WhileHeld => "while held (its TTL)",
            Lifetime::Idle => "a minute after its last use",
            Lifetime::UntilLastDeadline => "until its last deadline",
            Lifetime::RequestRecord => "while its run lasts, then the retention",
            Lifetime::WithQueue => "with the queue",
            Lifetime::Channel => "a channel, not a key",
        })
    }
}

/// How long a key of `kind` lives: the kind as [`kind_of`] names it.
pub fn lifetime_of(kind: &str) -> Lifetime {
    match kind {
        "lock" | "permit-first" => Lifetime::WhileHeld,
        "fence" | "waiters" | "handoff" | "holds" | "permit-fence" | "permit-waiters" | "permit-holds"
        | "permit-writers" => Lifetime::Idle,
        "permits" | "permit-fences" | "permit-limit" | "throttle" | "throttle-bookings"
        | "throttle-closed" => Lifetime::UntilLastDeadline,
        "q:request" => Lifetime::RequestRecord,
        "wake" | "stop" | "permit-wake" | "q:wake" => Lifetime::Channel,
        _ => Lifetime::WithQueue,
    }
}

/// The kind of the Redis key `name` under `prefix` (`lock`, `fence`, `q:delayed`,
/// `q:pending`, `queues`, ...), or `None` when it is not one of redefer's.
pub fn kind_of(prefix: &str, name: &str) -> Option<String> {
    let rest = name.strip_prefix(prefix)?.strip_prefix(':')?;
    let Some((kind, tagged)) = rest.split_once(":{") else {
        // Registry keys: `<prefix>:queues`, `<prefix>:queue-shards`, ...
        return (!rest.is_empty() && !rest.contains(':')).then(|| rest.to_string());
    };
    if kind != "q" {
        return Some(kind.to_string());
    }
    // A queue's key, `q:{<queue>}:<what>[:<more>]`: the kind is `q:<what>`. The tag never
    // holds a brace (they are percent-encoded), so its first `}` ends it.
    let (_, suffix) = tagged.split_once('}')?;
    let what = suffix.strip_prefix(':')?.split(':').next()?;
    Some(format!("q:{what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_read_off_the_names() {
        assert_eq!(kind_of("p", "p:fence:{a%7Db}").as_deref(), Some("fence"));
        assert_eq!(kind_of("p", "p:q:{orders}:delayed").as_deref(), Some("q:delayed"));
        assert_eq!(
            kind_of("p", "p:q:{orders}:pending-jobs").as_deref(),
            Some("q:pending-jobs")
        );
        assert_eq!(kind_of("p", "p:queues").as_deref(), Some("queues"));
        assert_eq!(kind_of("p", "other:fence:{a}"), None);
        assert_eq!(kind_of("p", "p:"), None);
        assert_eq!(lifetime_of("fence"), Lifetime::Idle);
        assert_eq!(lifetime_of("q:delayed"), Lifetime::WithQueue);
    }
}
