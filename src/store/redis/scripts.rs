//! The Lua scripts, compiled into the binary from the `.lua` files beside this one.
//!
//! Each [`Script`] hashes its text once; calls go out as `EVALSHA`, and the redis crate loads
//! the text only when a server answers `NOSCRIPT` (first use, or after a restart or failover).
//! Every queue script starts with `queue_prelude.lua`, which names the queue's keys in the
//! order [`QueueKeys::in_script_order`](super::keys::QueueKeys::in_script_order) passes them.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub(super) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!(concat!("lua/", $file))));
    };
}

macro_rules! queue_script {
    ($name:ident, $file:literal) => {
        pub(super) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                include_str!("lua/queue_prelude.lua"),
                include_str!(concat!("lua/", $file))
            ))
        });
    };
}

script!(LOCK_ACQUIRE, "lock_acquire.lua");
script!(LOCK_EXTEND, "lock_extend.lua");
script!(LOCK_RELEASE, "lock_release.lua");
queue_script!(QUEUE_PUSH, "queue_push.lua");
queue_script!(QUEUE_CLAIM, "queue_claim.lua");
queue_script!(QUEUE_ACK, "queue_ack.lua");
queue_script!(QUEUE_RETRY, "queue_retry.lua");
queue_script!(QUEUE_BURY, "queue_bury.lua");
queue_script!(QUEUE_EXTEND, "queue_extend.lua");
queue_script!(QUEUE_CANCEL, "queue_cancel.lua");
queue_script!(QUEUE_INSPECT, "queue_inspect.lua");
queue_script!(QUEUE_STATS, "queue_stats.lua");
queue_script!(QUEUE_LIST, "queue_list.lua");
queue_script!(QUEUE_REQUEUE, "queue_requeue.lua");
queue_script!(QUEUE_PURGE, "queue_purge.lua");

#[cfg(test)]
mod tests {
    use crate::queue::rules;

    const PRELUDE: &str = include_str!("lua/queue_prelude.lua");
    const CLAIM: &str = include_str!("lua/queue_claim.lua");

    /// The Lua form of a reason built from text and values: its fixed parts, quoted, in order.
    fn lua_fragments(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|part| format!("'{part}'")).collect()
    }

    #[test]
    fn the_scripts_bury_with_the_reasons_the_memory_store_gives() {
        for reason in [rules::NOT_A_JOB_ID, rules::NO_ENVELOPE] {
            assert!(
                CLAIM.contains(&format!("'{reason}'")),
                "queue_claim.lua lacks {reason:?}"
            );
        }
        for parts in [rules::OVERSIZED, rules::LEASE_RAN_OUT] {
            let fragments = lua_fragments(&parts);
            let mut rest = CLAIM;
            for fragment in &fragments {
                let at = rest
                    .find(fragment.as_str())
                    .unwrap_or_else(|| panic!("queue_claim.lua lacks {fragment} (in order: {fragments:?})"));
                rest = &rest[at + fragment.len()..];
            }
        }
    }

    #[test]
    fn the_scripts_apply_the_same_limits_and_id_rule() {
        assert!(PRELUDE.contains(&format!("local MAX_PAGE = {}\n", rules::MAX_PAGE)));
        assert!(PRELUDE.contains(&format!("local MAX_JOB_ID_LEN = {}\n", rules::MAX_JOB_ID_LEN)));
        assert!(
            CLAIM.contains(&format!("string.find(id, '{}')", rules::JOB_ID_LUA_PATTERN)),
            "queue_claim.lua checks ids with the pattern of src/queue/rules.rs"
        );
    }
}
