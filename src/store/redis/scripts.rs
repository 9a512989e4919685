//! The Lua scripts, compiled into the binary from the `.lua` files beside this one.
//!
//! Each [`Script`] hashes its text once; calls go out as `EVALSHA`, and the redis crate loads
//! the text only when a server answers `NOSCRIPT` (first use, or after a restart or failover).

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub(super) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!(concat!("lua/", $file))));
    };
}

script!(LOCK_ACQUIRE, "lock_acquire.lua");
script!(LOCK_EXTEND, "lock_extend.lua");
script!(LOCK_RELEASE, "lock_release.lua");
script!(QUEUE_PUSH, "queue_push.lua");
script!(QUEUE_CLAIM, "queue_claim.lua");
script!(QUEUE_ACK, "queue_ack.lua");
script!(QUEUE_RETRY, "queue_retry.lua");
script!(QUEUE_BURY, "queue_bury.lua");
script!(QUEUE_EXTEND, "queue_extend.lua");
script!(QUEUE_CANCEL, "queue_cancel.lua");
script!(QUEUE_INSPECT, "queue_inspect.lua");
script!(QUEUE_STATS, "queue_stats.lua");
script!(QUEUE_LIST, "queue_list.lua");
script!(QUEUE_REQUEUE, "queue_requeue.lua");
script!(QUEUE_PURGE, "queue_purge.lua");
