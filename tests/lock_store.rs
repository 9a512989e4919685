//! Conformance of the lock operations of every store: the semantics `LockStore` documents.

use crate::support;

use crate::support::Shorthand;
use std::time::Duration;

use redefer::guard::Waiter;
use redefer::lock::{Acquisition, LockStore};
use redefer::{Fencing, FencingToken, LockKey, LockToken};

use support::{eventually, for_each_store};

const LONG: Duration = Duration::from_secs(60);

fn key(name: &str) -> LockKey {
    LockKey::new(name).unwrap()
}

async fn acquired<S: LockStore>(
    store: &S,
    key: &LockKey,
    token: LockToken,
    ttl: Duration,
) -> Option<FencingToken> {
    match store.try_acquire(key, token, ttl).await.unwrap() {
        Acquisition::Acquired(fence) => Some(fence.expect("try_acquire fences")),
        Acquisition::Held { .. } => None,
    }
}

async fn a_held_lock_refuses_others<S: LockStore>(store: S) {
    let k = key("order:1");
    assert!(acquired(&store, &k, LockToken::random(), LONG).await.is_some());
    match store.try_acquire(&k, LockToken::random(), LONG).await.unwrap() {
        Acquisition::Held {
            remaining: Some(remaining),
            ..
        } => {
            assert!(
                remaining <= LONG && remaining > LONG - Duration::from_secs(5),
                "{remaining:?}"
            );
        }
        other => panic!("expected the lock to be held, got {other:?}"),
    }
    // Other keys are independent.
    assert!(
        acquired(&store, &key("order:2"), LockToken::random(), LONG)
            .await
            .is_some()
    );
}

async fn a_resent_acquire_with_our_token_counts_as_held<S: LockStore>(store: S) {
    let k = key("order:1");
    let token = LockToken::random();
    let first = acquired(&store, &k, token, LONG).await.expect("first acquire");
    let again = acquired(&store, &k, token, LONG).await.expect("re-sent acquire");
    assert!(
        again >= first,
        "a re-sent acquire reports a fencing token no lower than the first: {first:?}, then {again:?}"
    );
    assert!(acquired(&store, &k, LockToken::random(), LONG).await.is_none());
    store.release(&k, token).await.unwrap();
    let next = acquired(&store, &k, LockToken::random(), LONG)
        .await
        .expect("next holder");
    assert!(
        next > again,
        "the next holder's token {next:?} is above the re-sent acquire's {again:?}"
    );
}

async fn fencing_tokens_strictly_increase_across_holders<S: LockStore>(store: S) {
    let k = key("order:1");
    let mut last = FencingToken(0);
    for _ in 0..20 {
        let token = LockToken::random();
        let fence = acquired(&store, &k, token, LONG).await.expect("free lock");
        assert!(fence > last, "{fence:?} after {last:?}");
        last = fence;
        assert!(store.release(&k, token).await.unwrap());
    }
}

async fn release_and_extend_check_the_token<S: LockStore>(store: S) {
    let k = key("order:1");
    let holder = LockToken::random();
    let stranger = LockToken::random();
    acquired(&store, &k, holder, LONG).await.expect("free lock");
    assert!(!store.release(&k, stranger).await.unwrap());
    assert!(!store.extend(&k, stranger, LONG).await.unwrap());
    assert!(
        acquired(&store, &k, LockToken::random(), LONG).await.is_none(),
        "still held"
    );
    assert!(store.extend(&k, holder, LONG).await.unwrap());
    assert!(store.release(&k, holder).await.unwrap());
    assert!(!store.release(&k, holder).await.unwrap(), "released once only");
}

async fn a_stale_holder_cannot_touch_the_next_holders_lock<S: LockStore>(store: S) {
    let k = key("order:1");
    let stale = LockToken::random();
    let old_fence = acquired(&store, &k, stale, Duration::from_millis(30))
        .await
        .expect("free lock");
    let next = LockToken::random();
    let new_fence = eventually(Duration::from_secs(5), "the short lock expires", || {
        acquired(&store, &k, next, LONG)
    })
    .await;
    assert!(new_fence > old_fence);
    assert!(!store.extend(&k, stale, LONG).await.unwrap());
    assert!(!store.release(&k, stale).await.unwrap());
    assert!(
        acquired(&store, &k, LockToken::random(), LONG).await.is_none(),
        "next holder keeps it"
    );
    assert!(store.release(&k, next).await.unwrap());
}

async fn extend_keeps_a_lock_past_its_first_ttl<S: LockStore>(store: S) {
    let k = key("order:1");
    let token = LockToken::random();
    acquired(&store, &k, token, Duration::from_millis(100))
        .await
        .expect("free lock");
    assert!(store.extend(&k, token, LONG).await.unwrap());
    match store.try_acquire(&k, LockToken::random(), LONG).await.unwrap() {
        Acquisition::Held {
            remaining: Some(remaining),
            ..
        } => assert!(remaining > Duration::from_secs(50)),
        other => panic!("expected held with the extended TTL, got {other:?}"),
    }
}

async fn hostile_keys_do_not_collide<S: LockStore>(store: S) {
    let names = [
        "a", "{a}", "a}", "}a", "%7Ba%7D", "a\0b", "a\0c", "ключ", "🔒", "a:b", "a%",
    ];
    for name in names {
        assert!(
            acquired(&store, &key(name), LockToken::random(), LONG)
                .await
                .is_some(),
            "{name:?} is free"
        );
    }
    let long = "x".repeat(redefer::key::MAX_KEY_LEN);
    assert!(
        acquired(&store, &key(&long), LockToken::random(), LONG)
            .await
            .is_some()
    );
}

/// A holder dies with others in line: once its TTL runs out, the key is free but not a
/// newcomer's, fenced or not. Its acquires keep finding the key held, the key goes to the first
/// in line, and no newcomer's token is left on it (the unfenced acquire, two plain commands,
/// takes such a key and must give it back before answering). The holder unfenced and the
/// newcomers fenced: a key the Redis store never saw counted, which its fenced newcomers take
/// by a script of their own.
async fn a_newcomer_never_takes_a_key_from_its_line<S: LockStore>(store: S) {
    for (holder, fencing) in [
        (Fencing::On, Fencing::On),
        (Fencing::Off, Fencing::Off),
        (Fencing::Off, Fencing::On),
    ] {
        let k = key(&format!("order:{holder:?}:{fencing:?}"));
        let short = Duration::from_millis(100);
        let held = store.try_acquire_in_line(&k, LockToken::random(), short, None, holder);
        assert!(matches!(held.await.unwrap(), Acquisition::Acquired(_)));
        let first = Waiter::caller(LockToken::random());
        assert_eq!(store.join(&k, &first, None).await.unwrap(), 0);
        let mut newcomers = Vec::new();
        eventually(
            Duration::from_secs(10),
            "the expired holder's key is reserved for its line",
            || {
                let newcomer = LockToken::random();
                newcomers.push(newcomer);
                let store = &store;
                let k = &k;
                async move {
                    match store
                        .try_acquire_in_line(k, newcomer, LONG, None, fencing)
                        .await
                        .unwrap()
                    {
                        Acquisition::Acquired(_) => {
                            panic!("{fencing:?}: a newcomer took the key from its line")
                        }
                        Acquisition::Held { reserved, .. } => reserved.then_some(()),
                    }
                }
            },
        )
        .await;
        for newcomer in &newcomers {
            assert!(
                !store.release(&k, *newcomer).await.unwrap(),
                "{fencing:?}: a newcomer's token was left on the key"
            );
        }
        let waiter = LockToken::random();
        assert!(
            matches!(
                store
                    .try_acquire_in_line(&k, waiter, LONG, Some(&first), fencing)
                    .await
                    .unwrap(),
                Acquisition::Acquired(_)
            ),
            "{fencing:?}: the first in line takes the key reserved for it"
        );
    }
}

for_each_store!(
    a_held_lock_refuses_others,
    a_resent_acquire_with_our_token_counts_as_held,
    fencing_tokens_strictly_increase_across_holders,
    release_and_extend_check_the_token,
    a_stale_holder_cannot_touch_the_next_holders_lock,
    extend_keeps_a_lock_past_its_first_ttl,
    hostile_keys_do_not_collide,
    a_newcomer_never_takes_a_key_from_its_line,
);

/// The server's own conditional commands, where it has them.
mod conditional {
    use super::*;

    /// Valkey 9 releases and extends a lock nobody waits for with its own DELIFEQ and SET IFEQ,
    /// no script; Redis 7, which has neither, with the scripts. Either way the lock behaves the same.
    async fn conditional_commands_release_and_extend_where_the_server_has_them(kind: crate::support::Server) {
        let server = crate::support::RedisServer::start_of(kind);
        let store = server.store().await;
        release_and_extend_with_the_servers_commands(&server, store, kind).await;
    }

    /// The same for a store over a connection the user made: its first acquire finds them.
    async fn a_store_over_a_connection_of_the_user_s_finds_the_conditional_commands_too(
        kind: crate::support::Server,
    ) {
        let server = crate::support::RedisServer::start_of(kind);
        let client = ::redis::Client::open(server.url()).unwrap();
        let conn = ::redis::aio::ConnectionManager::new(client).await.unwrap();
        release_and_extend_with_the_servers_commands(&server, redefer::RedisStore::new(conn), kind).await;
    }

    async fn release_and_extend_with_the_servers_commands<Conn>(
        server: &crate::support::RedisServer,
        store: redefer::RedisStore<Conn>,
        kind: crate::support::Server,
    ) where
        redefer::RedisStore<Conn>: LockStore,
    {
        let k = key("order:1");
        let token = LockToken::random();
        acquired(&store, &k, token, LONG).await.expect("acquired");
        assert!(store.extend(&k, token, LONG).await.unwrap());
        assert!(
            !store.extend(&k, LockToken::random(), LONG).await.unwrap(),
            "another token"
        );
        assert!(
            !store.release(&k, LockToken::random()).await.unwrap(),
            "another token"
        );
        assert!(store.release(&k, token).await.unwrap());
        assert!(
            acquired(&store, &k, LockToken::random(), LONG).await.is_some(),
            "released"
        );
        let stats: String = server.cmd(::redis::cmd("INFO").arg("commandstats")).await;
        let calls = |command: &str| {
            stats
                .lines()
                .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        };
        match kind {
            // One when the store is prepared (the probe), two releases.
            crate::support::Server::Valkey => assert_eq!(calls("delifeq"), 3, "{stats}"),
            crate::support::Server::Redis => assert_eq!(calls("delifeq"), 0, "{stats}"),
        }
    }

    crate::support::for_each_server!(
        conditional_commands_release_and_extend_where_the_server_has_them,
        a_store_over_a_connection_of_the_user_s_finds_the_conditional_commands_too,
    );
}

/// A line holding a member no redefer process writes (not UTF-8: another tool's, or damaged)
/// does not fail the key's operations: on Redis the acquire that handed the key to it, and
/// every acquire until its reservation ran out, answered a store error ("Cannot convert from
/// UTF-8") for the reply that named it. The member is not a waiter: it is handed the key, its
/// reservation runs out, and it is dropped, as a waiter that never came back.
mod hostile_lines {
    use super::*;
    use redefer::lock::Holders;
    use redefer::lock_set::{LockSetStore, SetAcquisition};

    async fn a_line_member_that_is_not_utf8_fails_no_acquire(kind: crate::support::Server) {
        let server = crate::support::RedisServer::start_of(kind);
        let store = server.store().await.with_reservation(Duration::from_millis(50));
        let prefix = store.prefix().as_str().to_string();
        for (line, holders) in [("waiters", Holders::One), ("permit-waiters", Holders::Permits(2))] {
            let k = key(&format!("order:{line}"));
            let member = [b"bad".as_slice(), b"\xff"].concat();
            let _: ::redis::Value = server
                .cmd(
                    ::redis::cmd("ZADD")
                        .arg(format!("{prefix}:{line}:{{order:{line}}}"))
                        .arg(1)
                        .arg(member),
                )
                .await;
            let token = LockToken::random();
            // Handed to the member first (it is first in line), then, its reservation over,
            // taken: every acquire meanwhile answers, none fails.
            eventually(
                Duration::from_secs(5),
                "the key taken once the member's reservation ran out",
                || async {
                    let acquisition = store
                        .acquire(&k, token, LONG, holders, None, Fencing::On)
                        .await
                        .unwrap_or_else(|error| panic!("{line}: {error}"));
                    matches!(acquisition, Acquisition::Acquired(_)).then_some(())
                },
            )
            .await;
            assert!(
                store.release_holding(&k, token, holders, None).await.unwrap(),
                "{line}"
            );
        }
        // A set of two keys, one with such a member in its line.
        let keys = [key("transfer:a"), key("transfer:b")];
        let _: ::redis::Value = server
            .cmd(
                ::redis::cmd("ZADD")
                    .arg(format!("{prefix}:waiters:{{transfer:b}}"))
                    .arg(1)
                    .arg(b"bad\xff".as_slice()),
            )
            .await;
        let token = LockToken::random();
        eventually(
            Duration::from_secs(5),
            "the set taken once the member's reservation ran out",
            || async {
                let acquisition = store
                    .acquire_set(&keys, token, LONG, None, Fencing::On)
                    .await
                    .unwrap_or_else(|error| panic!("the set: {error}"));
                matches!(acquisition, SetAcquisition::Acquired(_)).then_some(())
            },
        )
        .await;
    }

    crate::support::for_each_server!(a_line_member_that_is_not_utf8_fails_no_acquire);
}

/// A fencing counter that another tool set past 2^53 (the largest token a script counts
/// exactly; redefer's tokens are the clock in µs, far below it) hands out no token: the
/// acquire is refused with an error naming the counter, which is kept as it was. Before, a
/// set's keys and a semaphore's first permit took the token 2^63 from such a counter (it
/// wrapped to a negative number, read back unsigned), and the tokens after it went back to
/// the clock; a mutex answered "negative fencing token".
mod hostile_counters {
    use super::*;
    use redefer::lock::Holders;
    use redefer::lock_set::LockSetStore;

    /// Past i64 (a counter `INCR` refuses too), and just past 2^53 (one `INCR` counts on).
    const PAST_2_53: [&str; 2] = ["99999999999999999999999", "9007199254740993"];

    fn refused_naming(error: impl std::fmt::Display, counter: &str) {
        let said = error.to_string();
        assert!(
            said.contains(counter) && said.contains("2^53") && !said.contains("script:"),
            "{said}"
        );
    }

    async fn a_counter_past_what_a_token_can_be_is_refused_and_kept(kind: crate::support::Server) {
        let server = crate::support::RedisServer::start_of(kind);
        let store = server.store().await;
        let prefix = store.prefix().as_str().to_string();
        let set_counter = |name: String, held: &'static str| {
            let server = &server;
            async move {
                let _: () = server.cmd(::redis::cmd("SET").arg(&name).arg(held)).await;
                name
            }
        };
        let kept = |name: String| {
            let server = &server;
            async move {
                let held: String = server.cmd(::redis::cmd("GET").arg(&name)).await;
                let _: () = server.cmd(::redis::cmd("DEL").arg(&name)).await;
                held
            }
        };
        for held in PAST_2_53 {
            for (kind, holders) in [("fence", Holders::One), ("permit-fence", Holders::Permits(2))] {
                let k = key(&format!("order:{kind}:{held}"));
                let counter = set_counter(format!("{prefix}:{kind}:{{{}}}", k.as_str()), held).await;
                let token = LockToken::random();
                let error = store
                    .acquire(&k, token, LONG, holders, None, Fencing::On)
                    .await
                    .expect_err("no token is counted from the counter");
                refused_naming(error, &counter);
                assert_eq!(kept(counter).await, held, "{kind}");
                // Deleted, the counter counts from the clock again.
                let acquisition = store
                    .acquire(&k, token, LONG, holders, None, Fencing::On)
                    .await
                    .unwrap();
                assert!(
                    matches!(acquisition, Acquisition::Acquired(Some(FencingToken(fence))) if fence < 1 << 53),
                    "{kind}: {acquisition:?}"
                );
            }
            let keys = [
                key(&format!("transfer:a:{held}")),
                key(&format!("transfer:b:{held}")),
            ];
            let counter = set_counter(format!("{prefix}:fence:{{transfer:b:{held}}}"), held).await;
            let error = store
                .acquire_set(&keys, LockToken::random(), LONG, None, Fencing::On)
                .await
                .expect_err("no token is counted for the set");
            refused_naming(error, &counter);
            assert_eq!(kept(counter).await, held, "the set's counter");
        }
    }

    crate::support::for_each_server!(a_counter_past_what_a_token_can_be_is_refused_and_kept);
}
