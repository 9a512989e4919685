//! The least-privilege ACL user the guide documents (`src/guide/security.md`) is enough for the
//! lock layer (mutex and semaphore), the throttle, the policies for what waits (coalescing, line caps, debouncing,
//! superseding), the queue, the scheduler (wake-ups included) and the command's `locks`.

use crate::support;

use std::convert::Infallible;
use std::time::Duration;

use redefer::debounce::{Debounce, DebounceLayer};
use redefer::guard::LineCap;
use redefer::queue::DelayQueue;
use redefer::queue::QueueStats;
use redefer::strategy::{Coalesce, Defer, Retry, Supersede};
use redefer::throttle::{Rate, ThrottleLayer};
use redefer::{Backoff, LockLayer, RedisStore, Scheduler, SchedulerOptions};
use tokio::sync::mpsc;
use tower::{Layer, ServiceExt, service_fn};

use support::{RedisServer, eventually};

/// The rules of the guide's `ACL SETUSER billing >secret ...` line, read from the guide so
/// that the documentation and this test cannot drift apart.
fn readme_rules() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/guide/security.md"))
        .expect("the guide's security chapter");
    readme
        .lines()
        .find_map(|line| line.trim().strip_prefix("ACL SETUSER billing >secret "))
        .expect("the guide documents the ACL user")
        .to_string()
}

/// The commands the Lua scripts call, read from the scripts themselves.
fn commands_in_scripts() -> std::collections::BTreeSet<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/redis/lua");
    let mut commands = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(dir).expect("the scripts") {
        let text = std::fs::read_to_string(entry.expect("a script").path()).expect("script text");
        // `redis.call('ZADD', ...)`, `redis.pcall('HINCRBY', ...)` and `batched('ZADD', ...)`.
        let calls = ["redis.call('", "redis.pcall('", "batched('"]
            .into_iter()
            .flat_map(|call| text.split(call).skip(1));
        for call in calls {
            if let Some(name) = call
                .split('\'')
                .next()
                .filter(|name| name.chars().all(|c| c.is_ascii_uppercase()))
            {
                commands.insert(name.to_lowercase());
            }
        }
    }
    commands
}

#[test]
fn the_documented_user_may_run_every_command_the_scripts_call() {
    let rules = readme_rules();
    let granted: Vec<&str> = rules
        .split_whitespace()
        .filter_map(|rule| rule.strip_prefix('+'))
        .collect();
    let scripts = commands_in_scripts();
    assert!(scripts.len() > 10, "found the scripts' commands: {scripts:?}");
    let missing: Vec<_> = scripts
        .iter()
        .filter(|command| !granted.contains(&command.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the guide's ACL line lacks {missing:?} (Redis checks commands run by scripts)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_least_privilege_user_runs_everything() {
    let server = RedisServer::start();
    let readme = readme_rules();
    let mut rules = vec!["SETUSER", "billing", ">secret"];
    rules.extend(readme.split_whitespace());
    let () = server.cmd(redis::cmd("ACL").arg(&rules)).await;
    let url = format!("redis://billing:secret@127.0.0.1:{}", server.port());
    let store = RedisStore::connect(&url).await.expect("the user can connect");

    let queue = DelayQueue::<u64, _>::new(store.clone(), "charges").unwrap();
    let (handled_tx, mut handled) = mpsc::unbounded_channel();
    let service = LockLayer::new(store.clone(), |n: &u64| Some(format!("order:{n}"))).layer(service_fn(
        move |n: u64| {
            let handled_tx = handled_tx.clone();
            async move {
                handled_tx.send(n).unwrap();
                Ok::<_, Infallible>(())
            }
        },
    ));
    assert!(
        service.clone().oneshot(1).await.unwrap().done().is_some(),
        "lock, handle, release"
    );

    // The semaphore and the throttle, as the same user.
    let exports = LockLayer::new(store.clone(), |n: &u64| Some(format!("tenant:{n}")))
        .permits(2)
        .layer(service_fn(|_: u64| async { Ok::<_, Infallible>(()) }));
    assert!(
        exports.oneshot(1).await.unwrap().done().is_some(),
        "permit, handle, release"
    );
    let calls = ThrottleLayer::new(
        store.clone(),
        |n: &u64| Some(format!("customer:{n}")),
        Rate::per_second(1000).unwrap(),
    )
    .on_conflict(Retry::new(Backoff::default()))
    .layer(service_fn(|_: u64| async { Ok::<_, Infallible>(()) }));
    for _ in 0..3 {
        assert!(
            calls.clone().oneshot(1).await.unwrap().done().is_some(),
            "admitted or booked"
        );
    }

    // A long idle sleep: the job is picked up through the pub/sub wake-up only.
    let options = SchedulerOptions {
        max_idle: Duration::from_secs(30),
        ..SchedulerOptions::default()
    };
    let scheduler = Scheduler::new(queue.clone(), service).options(options).start();
    queue.push(&2, Duration::from_millis(100)).await.unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), handled.recv())
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), handled.recv())
            .await
            .unwrap(),
        Some(2)
    );
    eventually(Duration::from_secs(5), "acked", || async {
        (queue.operator().stats().await.unwrap() == QueueStats::default()).then_some(())
    })
    .await;
    scheduler.shutdown().await;
    assert!(store.locks(10).await.unwrap().is_empty());
    let waiting = store.clone().wait_for_replicas(0, Duration::from_millis(10));
    assert!(
        LockLayer::new(waiting, |n: &u64| Some(format!("order:{n}")))
            .layer(service_fn(|_: u64| async { Ok::<_, Infallible>(()) }))
            .oneshot(3)
            .await
            .is_ok()
    );

    // The policies for what waits, as the same user: coalesced deferrals, a capped line that
    // drops the oldest, a debounce, and a newer request that supersedes the holder.
    let syncs = DelayQueue::<u64, _>::new(store.clone(), "syncs").unwrap();
    let account = |_: &u64| Some("account:1".to_string());
    let noop = service_fn(|_: u64| async { Ok::<_, Infallible>(()) });
    let holder = redefer::LockToken::random();
    let held = redefer::LockKey::new("account:1").unwrap();
    support::Shorthand::try_acquire(&store, &held, holder, Duration::from_secs(30))
        .await
        .unwrap();
    let coalescing = LockLayer::new(store.clone(), account)
        .on_conflict(Coalesce::latest(syncs.clone()))
        .layer(noop);
    for n in 0..3 {
        let deferred = coalescing.clone().oneshot(n).await.unwrap();
        assert_eq!(deferred.deferred().unwrap().revision, n + 1);
    }
    let capped = LockLayer::new(store.clone(), account)
        .on_conflict(Defer::new(syncs.clone()).max_waiting(LineCap::new(1).drop_oldest()))
        .layer(noop);
    assert!(capped.oneshot(9).await.unwrap().deferred().is_some());
    assert_eq!(
        syncs.operator().stats().await.unwrap().dead,
        1,
        "the coalesced job made room"
    );
    support::Shorthand::release(&store, &held, holder).await.unwrap();
    let debounce = Debounce::new(Duration::from_millis(50), Duration::from_secs(1)).unwrap();
    let debounced =
        DebounceLayer::new(syncs.clone(), |n: &u64| Some(format!("doc:{n}")), debounce).layer(noop);
    let first = debounced.clone().oneshot(1).await.unwrap();
    let second = debounced.oneshot(1).await.unwrap();
    assert_eq!(
        first.deferred().unwrap().job_id,
        second.deferred().unwrap().job_id
    );
    let superseding = LockLayer::new(store.clone(), |n: &u64| Some(format!("doc:{}", n % 2)))
        .on_conflict(Supersede::new())
        .layer(service_fn(|n: u64| async move {
            if n == 0 {
                redefer::current_lock().unwrap().superseded().await;
            }
            Ok::<_, Infallible>(n)
        }));
    let older = tokio::spawn(superseding.clone().oneshot(0));
    eventually(Duration::from_secs(5), "the older holds", || async {
        let locks = store.locks(10).await.unwrap();
        locks.iter().any(|lock| lock.key == "doc:0").then_some(())
    })
    .await;
    assert_eq!(superseding.oneshot(2).await.unwrap().done(), Some(2));
    assert_eq!(older.await.unwrap().unwrap().done(), Some(0));
}
