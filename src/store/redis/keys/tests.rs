//! The key layout's tests: hash tags, the scripts' preludes, and the guide's key tables.

use std::collections::BTreeSet;

use super::*;

#[test]
fn braces_stay_inside_one_hash_tag() {
    let prefix = Prefix::default();
    let keys = LockKeys::new(&prefix, &LockKey::new("}{a}").unwrap());
    assert_eq!(keys.lock(), "redefer:lock:{%7D%7Ba%7D}");
    assert_eq!(keys.fence(), "redefer:fence:{%7D%7Ba%7D}");
    for key in keys.all() {
        assert!(key.ends_with(":{%7D%7Ba%7D}"), "{key}");
    }
}

#[test]
fn every_key_of_a_queue_shares_one_hash_tag() {
    let keys = QueueKeys::new(&Prefix::default(), &QueueName::new("or{d}ers").unwrap());
    assert_eq!(keys.in_script_order()[0], "redefer:q:{or%7Bd%7Ders}:delayed");
    assert_eq!(keys.activity(), "redefer:q:{or%7Bd%7Ders}:activity");
    assert_eq!(
        keys.pending(),
        [
            "redefer:q:{or%7Bd%7Ders}:pending",
            "redefer:q:{or%7Bd%7Ders}:pending-jobs"
        ]
    );
    assert_eq!(keys.wake(), "redefer:q:{or%7Bd%7Ders}:wake");
    for key in keys.all() {
        assert!(key.starts_with("redefer:q:{or%7Bd%7Ders}:"), "{key}");
    }
}

/// The prelude declares `local A, B =\n  KEYS[1], KEYS[2]` for these names, in order.
fn assert_declares(prelude: &str, names: &[&str]) {
    let declared = format!(
        "local {} =\n  {}",
        names.join(", "),
        (1..=names.len())
            .map(|i| format!("KEYS[{i}]"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(
        prelude.contains(&declared),
        "the prelude must declare:\n{declared}"
    );
}

#[test]
fn the_lock_prelude_names_the_keys_in_script_order() {
    assert_declares(
        include_str!("../lua/lock_prelude.lua"),
        &["LOCK", "FENCE", "WAITERS", "HANDOFF", "HOLDS"],
    );
}

#[test]
fn the_permit_prelude_names_the_keys_in_script_order() {
    assert_declares(
        include_str!("../lua/permit_prelude.lua"),
        &[
            "PERMITS", "FENCES", "FENCE", "LIMIT", "WAITERS", "HOLDS", "WRITERS", "FIRST",
        ],
    );
}

#[test]
fn the_prelude_names_the_keys_in_script_order() {
    let prelude = include_str!("../lua/queue_prelude.lua");
    assert_declares(
        prelude,
        &[
            "DELAYED", "INFLIGHT", "JOBS", "LEASES", "DEAD", "ERRORS", "EXPIRIES", "FENCE", "HANDED", "DONE",
            "FINISHED", "ACTIVITY", "PAUSED", "CLAIMS",
        ],
    );
    for set in JobSet::ALL {
        let name = QueueKeys::set_name(set);
        assert!(
            prelude.contains(&format!("{name} = {}", name.to_uppercase())),
            "the prelude's SETS names {name}"
        );
    }
}

/// The guide's key tables, in the chapters of the guards and the queue.
const KEY_TABLES: &str = concat!(
    include_str!("../../../guide/lock.md"),
    include_str!("../../../guide/semaphore.md"),
    include_str!("../../../guide/throttle.md"),
    include_str!("../../../guide/deferral.md"),
);

/// The guide's key tables are the documentation of this file: every Redis key named there
/// is one these functions build, and the other way round.
#[test]
fn the_guide_key_tables_list_exactly_these_keys() {
    let documented: BTreeSet<&str> = KEY_TABLES
        .lines()
        .filter_map(|line| line.strip_prefix("| `<prefix>:"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| name)
        .collect();

    let prefix = Prefix::new("<prefix>").unwrap();
    let queue = QueueKeys::new(&prefix, &QueueName::new("<queue>").unwrap());
    let lock = LockKeys::new(&prefix, &LockKey::new("<key>").unwrap());
    let permits = PermitKeys::new(&prefix, &LockKey::new("<key>").unwrap());
    let throttle = ThrottleKeys::new(&prefix, &LockKey::new("<key>").unwrap());
    let request = QueueKeys::request(
        &prefix,
        &QueueName::new("<queue>").unwrap(),
        &JobId::new("id").unwrap(),
    );
    let built: Vec<String> = queue
        .all()
        .chain(lock.all())
        .chain(permits.all())
        .chain(throttle.all())
        .chain([request.as_str()])
        .map(str::to_string)
        .collect();
    let built: BTreeSet<&str> = built
        .iter()
        .map(|name| name.strip_prefix("<prefix>:").expect("built under the prefix"))
        .collect();
    assert_eq!(
        documented, built,
        "the guide's key tables (left) against src/store/redis/keys.rs (right)"
    );
}

/// The guide's key tables say how long each key lives, as `lifetimes::lifetime_of` does.
#[test]
fn the_guide_key_tables_say_how_long_each_key_lives() {
    let mut checked = 0;
    for line in KEY_TABLES.lines().filter(|line| line.starts_with("| `<prefix>:")) {
        let name = line.split('`').nth(1).expect("a key's name in backquotes");
        let lives = line
            .trim_end_matches('|')
            .rsplit('|')
            .next()
            .unwrap_or_default()
            .trim();
        let kind = crate::store::lifetimes::kind_of("<prefix>", name)
            .unwrap_or_else(|| panic!("{name} is not a redefer key"));
        let lifetime = crate::store::lifetimes::lifetime_of(&kind);
        assert_eq!(lives, lifetime.to_string(), "how long {name} lives");
        checked += 1;
    }
    assert!(checked > 30, "only {checked} keys documented");
}
