//! The Lua scripts, compiled into the binary from the `.lua` files beside this one.
//!
//! Each [`Script`] hashes its text once; calls go out as `EVALSHA`. The store loads every
//! script when it connects ([`load_all`]), so that even the first call of each is one
//! request (a release a dropped call leaves to the background keeps its place on the
//! connection only as one request); the redis crate loads the text again when a server
//! answers `NOSCRIPT` (after a restart or failover).
//! Every script of a family starts with `fence.lua` (the fencing counters' steps), then its
//! family's prelude. Every queue script's prelude is `queue_prelude.lua`, which names the
//! queue's keys in the order [`QueueKeys::in_script_order`](super::keys::QueueKeys::in_script_order)
//! passes them; every lock script's is `lock_prelude.lua` (for
//! [`LockKeys::in_script_order`](super::keys::LockKeys::in_script_order)) and every permit
//! script's `permit_prelude.lua`, each followed by `line.lua`, the key's line, which the two
//! families share (their join scripts also share `line_join.lua`: a place in line, its cap).
//!
//! Each script's first line declares its flags (Redis 7 and Valkey): reads are `no-writes`;
//! every write runs under `allow-oom` except the push, so that when Redis is full (with
//! `maxmemory` and `noeviction`) pushes are refused first, while locks, claims, acks, retries
//! and burials go on and drain the queue. Those write little, and the acks free memory.

use std::sync::LazyLock;

use redis::Script;
use redis::aio::ConnectionLike;

/// A script of `family` ("lock" or "queue"): its file with the family's prelude.
macro_rules! script {
    ($name:ident, $prelude:expr, $file:literal) => {
        pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(&with_prelude(
                $prelude,
                include_str!(concat!("lua/", $file)),
            ))
        });
    };
}

const QUEUE_PRELUDE: &str = include_str!("lua/queue_prelude.lua");
/// Every lock script's prelude: the lock's keys and steps, then the line's.
const LOCK_PRELUDE: &str = concat!(include_str!("lua/lock_prelude.lua"), include_str!("lua/line.lua"));
/// Every permit script's prelude: the semaphore's keys and steps, then the line's.
const PERMIT_PRELUDE: &str = concat!(
    include_str!("lua/permit_prelude.lua"),
    include_str!("lua/line.lua")
);
/// The fencing counters' steps, before every family's prelude (`lua/fence.lua`).
const FENCE: &str = include_str!("lua/fence.lua");
/// Joining a line (a place in it, its cap), shared by the two join scripts after the line.
const LINE_JOIN: &str = include_str!("lua/line_join.lua");

/// The steps of a set of lock keys, after the lock's prelude, the line's and the join's.
const SET_PRELUDE: &str = include_str!("lua/set_prelude.lua");

/// A script with the fence steps and `prelude` after its first line, which must stay first:
/// the flags.
fn with_prelude(prelude: &str, script: &str) -> String {
    let (flags, body) = script.split_once('\n').unwrap_or((script, ""));
    format!("{flags}\n{FENCE}{prelude}{body}")
}

script!(LOCK_ACQUIRE, LOCK_PRELUDE, "lock_acquire.lua");
// The fenced acquire of a key not seen counted: the fence steps only, no lock prelude.
script!(LOCK_ACQUIRE_NEW, "", "lock_acquire_new.lua");
script!(LOCK_EXTEND, LOCK_PRELUDE, "lock_extend.lua");
script!(LOCK_RELEASE, LOCK_PRELUDE, "lock_release.lua");
script!(LOCK_JOIN, &[LOCK_PRELUDE, LINE_JOIN].concat(), "lock_join.lua");
/// The release of a lock nobody waits for: two keys, no prelude (its cost is per key and argument).
/// Also the give-back of a first permit taken where others held (a delete by value).
pub(crate) static LOCK_RELEASE_ALONE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/lock_release_alone.lua")));
script!(LOCK_LEAVE, LOCK_PRELUDE, "lock_leave.lua");
script!(
    SET_ACQUIRE,
    &[LOCK_PRELUDE, LINE_JOIN, SET_PRELUDE].concat(),
    "set_acquire.lua"
);
script!(
    SET_JOIN,
    &[LOCK_PRELUDE, LINE_JOIN, SET_PRELUDE].concat(),
    "set_join.lua"
);
script!(
    SET_LEAVE,
    &[LOCK_PRELUDE, LINE_JOIN, SET_PRELUDE].concat(),
    "set_leave.lua"
);
script!(PERMIT_ACQUIRE, PERMIT_PRELUDE, "permit_acquire.lua");
// The acquire of a key nobody waits for: the fence steps only, no permit prelude.
script!(PERMIT_ACQUIRE_FREE, "", "permit_acquire_free.lua");
script!(PERMIT_EXTEND, PERMIT_PRELUDE, "permit_extend.lua");
script!(PERMIT_RELEASE, PERMIT_PRELUDE, "permit_release.lua");
/// The release of a permit nobody waits for: three keys, no prelude.
pub(crate) static PERMIT_RELEASE_ALONE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/permit_release_alone.lua")));
script!(
    PERMIT_JOIN,
    &[PERMIT_PRELUDE, LINE_JOIN].concat(),
    "permit_join.lua"
);
script!(PERMIT_LEAVE, PERMIT_PRELUDE, "permit_leave.lua");
/// The throttle's scripts: the schedule's prelude only (no fences, no line).
const THROTTLE_PRELUDE: &str = include_str!("lua/throttle_prelude.lua");
/// A throttle script: its flags line, the schedule's prelude, its body.
fn with_schedule(script: &str) -> String {
    let (flags, body) = script.split_once('\n').unwrap_or((script, ""));
    format!("{flags}\n{THROTTLE_PRELUDE}{body}")
}
/// The throttle's decision: a request admitted, refused or booked.
pub(crate) static THROTTLE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_schedule(include_str!("lua/throttle.lua"))));
/// A key closed until a time an upstream named.
pub(crate) static THROTTLE_CLOSE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_schedule(include_str!("lua/throttle_close.lua"))));
/// A closed key reopened by an operator.
pub(crate) static THROTTLE_REOPEN: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_schedule(include_str!("lua/throttle_reopen.lua"))));
script!(QUEUE_PUSH_MANY, QUEUE_PRELUDE, "queue_push_many.lua");
script!(QUEUE_PENDING, QUEUE_PRELUDE, "queue_pending.lua");
script!(REQUEST_RECORD, QUEUE_PRELUDE, "request_record.lua");
script!(QUEUE_CLAIM, QUEUE_PRELUDE, "queue_claim.lua");
script!(QUEUE_ACK, QUEUE_PRELUDE, "queue_ack.lua");
script!(QUEUE_RETRY, QUEUE_PRELUDE, "queue_retry.lua");
script!(QUEUE_BURY, QUEUE_PRELUDE, "queue_bury.lua");
script!(QUEUE_BURY_WAITING, QUEUE_PRELUDE, "queue_bury_waiting.lua");
script!(QUEUE_EXTEND, QUEUE_PRELUDE, "queue_extend.lua");
script!(QUEUE_CANCEL, QUEUE_PRELUDE, "queue_cancel.lua");
script!(QUEUE_INSPECT, QUEUE_PRELUDE, "queue_inspect.lua");
script!(QUEUE_STATS, QUEUE_PRELUDE, "queue_stats.lua");
script!(QUEUE_LIST, QUEUE_PRELUDE, "queue_list.lua");
script!(QUEUE_GROUPS, QUEUE_PRELUDE, "queue_groups.lua");
script!(QUEUE_REQUEUE, QUEUE_PRELUDE, "queue_requeue.lua");
script!(QUEUE_PURGE, QUEUE_PRELUDE, "queue_purge.lua");
script!(QUEUE_PROMOTE, QUEUE_PRELUDE, "queue_promote.lua");
script!(QUEUE_PAUSE, QUEUE_PRELUDE, "queue_pause.lua");
script!(QUEUE_RUN_NOW, QUEUE_PRELUDE, "queue_run_now.lua");

/// Every script, for [`load_all`].
static ALL: [&LazyLock<Script>; 39] = [
    &LOCK_ACQUIRE,
    &SET_ACQUIRE,
    &SET_JOIN,
    &SET_LEAVE,
    &LOCK_ACQUIRE_NEW,
    &LOCK_EXTEND,
    &LOCK_RELEASE,
    &LOCK_RELEASE_ALONE,
    &LOCK_JOIN,
    &LOCK_LEAVE,
    &PERMIT_ACQUIRE,
    &PERMIT_ACQUIRE_FREE,
    &PERMIT_EXTEND,
    &PERMIT_RELEASE,
    &PERMIT_RELEASE_ALONE,
    &PERMIT_JOIN,
    &PERMIT_LEAVE,
    &THROTTLE,
    &THROTTLE_CLOSE,
    &THROTTLE_REOPEN,
    &QUEUE_PUSH_MANY,
    &QUEUE_PENDING,
    &REQUEST_RECORD,
    &QUEUE_CLAIM,
    &QUEUE_ACK,
    &QUEUE_RETRY,
    &QUEUE_BURY,
    &QUEUE_BURY_WAITING,
    &QUEUE_EXTEND,
    &QUEUE_CANCEL,
    &QUEUE_INSPECT,
    &QUEUE_STATS,
    &QUEUE_LIST,
    &QUEUE_GROUPS,
    &QUEUE_REQUEUE,
    &QUEUE_PURGE,
    &QUEUE_PROMOTE,
    &QUEUE_PAUSE,
    &QUEUE_RUN_NOW,
];

/// Loads every script into the server (every primary of a cluster).
pub(super) async fn load_all(conn: &mut impl ConnectionLike) -> Result<(), redis::RedisError> {
    for script in ALL {
        script.load_async(conn).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::QUEUE_PRELUDE as PRELUDE;
    use crate::queue::rules;

    const CLAIM: &str = include_str!("lua/queue_claim.lua");

    /// The Lua form of a reason built from text and values: its fixed parts, quoted, in order.
    fn lua_fragments(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|part| format!("'{part}'")).collect()
    }

    /// The files of `lua/` that are parts of scripts (preludes and shared steps), not scripts.
    const PARTS: [&str; 3] = ["fence", "line", "line_join"];

    /// Every script of `lua/`, by name, read from the directory: a script added there is
    /// checked without being listed here.
    fn scripts() -> Vec<(String, String)> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/redis/lua");
        let mut scripts = Vec::new();
        for entry in std::fs::read_dir(dir).expect("the scripts' directory") {
            let path = entry.expect("a script").path();
            let name = path
                .file_stem()
                .and_then(|stem| stem.to_str())
                .expect("a name")
                .to_string();
            if !(name.ends_with("_prelude") || PARTS.contains(&name.as_str())) {
                scripts.push((name, std::fs::read_to_string(&path).expect("the script's text")));
            }
        }
        assert!(scripts.len() > 30, "found {} scripts", scripts.len());
        scripts
    }

    /// Only the push may be refused when Redis is full; only reads are `no-writes`.
    #[test]
    fn every_script_declares_its_flags_first() {
        for (name, text) in scripts() {
            let flags = text.lines().next().unwrap_or_default();
            let expected = match name.as_str() {
                "queue_push_many" | "queue_pending" => "#!lua",
                "queue_inspect" | "queue_stats" | "queue_list" | "queue_groups" => "#!lua flags=no-writes",
                _ => "#!lua flags=allow-oom",
            };
            assert_eq!(flags, expected, "{name}.lua");
        }
        let claim = super::with_prelude(PRELUDE, CLAIM);
        assert!(claim.starts_with("#!lua flags=allow-oom\n-- Fencing counters"));
    }

    /// The store loads every script when it connects, so that none waits for a `NOSCRIPT`.
    #[test]
    fn the_store_loads_every_script() {
        assert_eq!(super::ALL.len(), scripts().len());
    }

    #[test]
    fn the_scripts_bury_with_the_reasons_the_memory_store_gives() {
        assert!(
            CLAIM.contains(&format!("'{}'", rules::NO_ENVELOPE)),
            "queue_claim.lua lacks {:?}",
            rules::NO_ENVELOPE
        );
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

    /// The scripts keep a lock key's keys as long as `lifetimes::IDLE_KEY_TTL` says: the
    /// prelude's `IDLE_MS`, and the scripts without the prelude that write such a key.
    #[test]
    fn the_scripts_keep_idle_keys_as_long_as_the_lifetimes_say() {
        let idle_ms = crate::store::lifetimes::IDLE_KEY_TTL.as_millis();
        assert!(super::FENCE.contains(&format!("local IDLE_MS = {idle_ms}\n")));
        for alone in [
            include_str!("lua/lock_release_alone.lua"),
            include_str!("lua/permit_release_alone.lua"),
        ] {
            assert!(alone.contains(&format!("'PX', {idle_ms})")));
        }
    }

    #[test]
    fn the_scripts_apply_the_same_limits() {
        assert!(PRELUDE.contains(&format!("local MAX_PAGE = {}\n", rules::MAX_PAGE)));
        assert!(PRELUDE.contains(&format!("local MAX_JOB_ID_LEN = {}\n", rules::MAX_JOB_ID_LEN)));
        assert!(PRELUDE.contains(&format!(
            "local MAX_LEASE_MS = {}\n",
            rules::MAX_LEASE.as_millis()
        )));
    }
}
