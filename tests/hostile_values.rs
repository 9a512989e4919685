//! Every Redis key a guard keeps, overwritten by another client (a value of another type, a
//! string, a number past 2^63): each call answers, a value or a typed error in words an
//! operator reads, within 5 s, a handler never runs with a token past 2^53, and the guard works
//! again once the key is deleted. The guards'
//! own suites pin what each answer is (`lock_store::hostile_counters`,
//! `throttle::hostile_state`, ...); this one pins, for every key there is, that no call hangs,
//! panics or leaves its key broken.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redefer::lock::current_locks;
use redefer::lock_set::LockSetLayer;
use redefer::read_write::{Access, ReadWriteLayer};
use redefer::throttle::{Rate, ThrottleLayer};
use redefer::{LockLayer, Outcome, RedisStore};
use tokio::sync::Notify;
use tower::{Layer, ServiceExt, service_fn};

use crate::support::{RedisServer, Server, eventually, for_each_server};

/// What a call answered: its outcome, or its error as it reads.
type Answer = Result<Outcome<()>, String>;

/// One call through a guard, its handler waiting for `release`.
type Call = Box<dyn Fn(Arc<Notify>) -> Pin<Box<dyn Future<Output = Answer> + Send>> + Send + Sync>;

/// Each guard kind on its own key, failing fast (the default strategy).
fn guards(store: &RedisStore) -> Vec<(&'static str, Call)> {
    fn handler(
        release: Arc<Notify>,
    ) -> impl tower::Service<u8, Response = (), Error = Infallible, Future: Send> + Clone {
        service_fn(move |_: u8| {
            let release = Arc::clone(&release);
            // A token is the clock in µs, or counted on from it: never past 2^53, whatever
            // another client wrote to a counter.
            let fences: Vec<u64> = current_locks()
                .iter()
                .filter_map(|lock| lock.fence)
                .map(|fence| fence.0)
                .collect();
            async move {
                assert!(fences.iter().all(|fence| *fence < 1 << 53), "tokens {fences:?}");
                release.notified().await;
                Ok::<_, Infallible>(())
            }
        })
    }
    let (mutex, semaphore, set, read_write, throttle) = (
        store.clone(),
        store.clone(),
        store.clone(),
        store.clone(),
        store.clone(),
    );
    vec![
        (
            "mutex",
            Box::new(move |release| {
                let service =
                    LockLayer::new(mutex.clone(), |_: &u8| Some("mutex".to_string())).layer(handler(release));
                Box::pin(answer(service))
            }),
        ),
        (
            "semaphore",
            Box::new(move |release| {
                let service = LockLayer::new(semaphore.clone(), |_: &u8| Some("semaphore".to_string()))
                    .permits(2)
                    .layer(handler(release));
                Box::pin(answer(service))
            }),
        ),
        (
            "set",
            Box::new(move |release| {
                let service = LockSetLayer::new(set.clone(), |_: &u8| {
                    Some(vec!["set:a".to_string(), "set:b".to_string()])
                })
                .layer(handler(release));
                Box::pin(answer(service))
            }),
        ),
        (
            "read-write",
            Box::new(move |release| {
                // A writer, then (the same key) a reader, which does not wait: each keeps keys
                // of its own.
                let writes = ReadWriteLayer::new(
                    read_write.clone(),
                    |_: &u8| Some("rw".to_string()),
                    |_: &u8| Access::Write,
                )
                .layer(handler(release));
                let reads = ReadWriteLayer::new(
                    read_write.clone(),
                    |_: &u8| Some("rw".to_string()),
                    |_: &u8| Access::Read,
                )
                .layer(handler(released()));
                Box::pin(async move {
                    match answer(writes).await? {
                        Outcome::Done(()) => answer(reads).await,
                        not_run => Ok(not_run),
                    }
                })
            }),
        ),
        (
            "throttle",
            Box::new(move |release| {
                let rate = Rate::per_second(1_000).expect("a valid rate");
                let service =
                    ThrottleLayer::new(throttle.clone(), |_: &u8| Some("throttle".to_string()), rate)
                        .layer(handler(release));
                Box::pin(answer(service))
            }),
        ),
    ]
}

/// One request through `service`: its outcome, or its error as it reads.
async fn answer<S>(service: S) -> Answer
where
    S: tower::Service<u8, Response = Outcome<()>>,
    S::Error: std::fmt::Display,
{
    service.oneshot(1).await.map_err(|error| error.to_string())
}

/// A handler's release that has already come.
fn released() -> Arc<Notify> {
    let release = Arc::new(Notify::new());
    release.notify_one();
    release
}

async fn keys_under(server: &RedisServer, prefix: &str) -> Vec<String> {
    server.cmd(::redis::cmd("KEYS").arg(format!("{prefix}:*"))).await
}

async fn every_key_of_every_guard_overwritten_is_answered_and_recovers(kind: Server) {
    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    for (guard, call) in guards(&store) {
        // The keys the guard keeps while a call holds its key, and after.
        let release = Arc::new(Notify::new());
        let holding = tokio::spawn(call(Arc::clone(&release)));
        let mut keys = eventually(Duration::from_secs(5), "the holding's keys", || async {
            let keys = keys_under(&server, &prefix).await;
            (!keys.is_empty()).then_some(keys)
        })
        .await;
        release.notify_one();
        let held = tokio::time::timeout(Duration::from_secs(5), holding).await;
        assert!(matches!(held, Ok(Ok(Ok(Outcome::Done(()))))), "{guard}: {held:?}");
        keys.extend(keys_under(&server, &prefix).await);
        keys.sort();
        keys.dedup();
        for key in &keys {
            for (what, write) in [
                (
                    "a hash",
                    ::redis::cmd("HSET").arg(key).arg("field").arg("value").clone(),
                ),
                ("a list", ::redis::cmd("RPUSH").arg(key).arg("x").clone()),
                ("a string", ::redis::cmd("SET").arg(key).arg("garbage").clone()),
                (
                    "a number past 2^63",
                    ::redis::cmd("SET")
                        .arg(key)
                        .arg("99999999999999999999999")
                        .clone(),
                ),
            ] {
                let _: i64 = server.cmd(::redis::cmd("DEL").arg(key)).await;
                let _: ::redis::Value = server.cmd(&write).await;
                let answer = tokio::time::timeout(Duration::from_secs(5), tokio::spawn(call(released())))
                    .await
                    .unwrap_or_else(|_| panic!("{guard}, {key} as {what}: no answer within 5 s"))
                    .unwrap_or_else(|panic| panic!("{guard}, {key} as {what}: {panic}"));
                if let Err(said) = &answer {
                    assert!(!said.contains("script:"), "{guard}, {key} as {what}: {said}");
                }
                let _: i64 = server.cmd(::redis::cmd("DEL").arg(key)).await;
                eventually(Duration::from_secs(5), "the guard works again", || async {
                    let again = tokio::time::timeout(Duration::from_secs(5), call(released()))
                        .await
                        .unwrap_or_else(|_| panic!("{guard}, {key} after {what}: no answer within 5 s"));
                    matches!(again, Ok(Outcome::Done(()))).then_some(())
                })
                .await;
            }
        }
        for key in keys_under(&server, &prefix).await {
            let _: i64 = server.cmd(::redis::cmd("DEL").arg(key)).await;
        }
    }
}

for_each_server!(every_key_of_every_guard_overwritten_is_answered_and_recovers);
