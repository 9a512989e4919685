//! The delay queue and scheduler against a misbehaving Redis: bytes written by other clients,
//! a server killed and restarted, and the cost of an idle scheduler.

use crate::support;

use crate::support::Shorthand;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redefer::queue::DelayQueue;
use redefer::queue::QueueRegistry;
use redefer::queue::{QueueStats, RawJobState};
use redefer::{LockLayer, RedisStore, Scheduler, SchedulerOptions};
use serde::{Deserialize, Serialize};
use tower::{Layer, service_fn};

use support::{RedisServer, Server, eventually, for_each_server};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Charge {
    order: u64,
}

fn by_order(charge: &Charge) -> Option<String> {
    Some(format!("order:{}", charge.order))
}

/// A handler that records the orders it handled.
fn recorder() -> (
    impl tower::Service<Charge, Response = (), Error = std::convert::Infallible, Future = impl Send>
    + Clone
    + Send
    + 'static,
    Arc<Mutex<Vec<u64>>>,
) {
    let handled: Arc<Mutex<Vec<u64>>> = Arc::default();
    let record = handled.clone();
    let handler = service_fn(move |charge: Charge| {
        let record = record.clone();
        async move {
            record.lock().unwrap().push(charge.order);
            Ok::<_, std::convert::Infallible>(())
        }
    });
    (handler, handled)
}

/// A scheduler whose handler records the orders it handled.
fn recording_scheduler(
    store: RedisStore,
    queue: &DelayQueue<Charge, RedisStore>,
    options: SchedulerOptions,
) -> (redefer::SchedulerHandle, Arc<Mutex<Vec<u64>>>) {
    let (handler, handled) = recorder();
    let service = LockLayer::new(store, by_order).layer(handler);
    (
        Scheduler::new(queue.clone(), service).options(options).start(),
        handled,
    )
}

fn quick() -> SchedulerOptions {
    SchedulerOptions {
        max_idle: Duration::from_millis(100),
        ..SchedulerOptions::default()
    }
}

async fn entries_written_by_other_clients_are_buried_with_a_reason_and_the_rest_run(kind: Server) {
    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges")
        .unwrap()
        .max_payload(64 * 1024);
    let prefix = store.prefix().as_str().to_string();
    let key = |suffix: &str| format!("{prefix}:q:{{charges}}:{suffix}");
    for order in 1..=3 {
        queue.push(&Charge { order }, Duration::ZERO).await.unwrap();
    }
    let hostile: [(&str, Option<Vec<u8>>, &str); 7] = [
        ("garbage", Some(b"\xff\xfenot json".to_vec()), "cannot decode the envelope"),
        ("truncated", Some(br#"{"id":"truncated","attempt":0,"enq"#.to_vec()), "cannot decode the envelope"),
        ("wrong-schema", Some(br#"{"id":"wrong-schema","payload":{"order":"seven"}}"#.to_vec()), "cannot decode the envelope"),
        ("stolen", Some(serde_json::to_vec(&serde_json::json!({"id": "someone-else", "attempt": 0, "enqueued_at_ms": 0, "last_error": null, "payload": {"order": 9}})).unwrap()), "belongs to job someone-else"),
        ("huge", Some(vec![b'x'; 100 * 1024]), "over the limit"),
        ("no-envelope", None, "has no envelope"),
        ("bad id {with} spaces", Some(b"{}".to_vec()), "not a job id"),
    ];
    for (id, bytes, _) in &hostile {
        if let Some(bytes) = bytes {
            let _: i64 = server
                .cmd(
                    ::redis::cmd("HSET")
                        .arg(key("jobs"))
                        .arg(id)
                        .arg(bytes.as_slice()),
                )
                .await;
        }
        let _: i64 = server
            .cmd(::redis::cmd("ZADD").arg(key("delayed")).arg(0).arg(id))
            .await;
    }

    let (scheduler, handled) = recording_scheduler(store, &queue, quick());
    eventually(
        Duration::from_secs(10),
        "good jobs handled, hostile ones buried",
        || async {
            let stats = queue.operator().stats().await.unwrap();
            (stats
                == QueueStats {
                    dead: hostile.len() as u64,
                    ..QueueStats::default()
                })
            .then_some(())
        },
    )
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!(report.acked, 3);
    assert_eq!(
        handled.lock().unwrap().iter().copied().collect::<HashSet<_>>(),
        HashSet::from([1, 2, 3])
    );
    for (id, _, reason) in hostile {
        let recorded: String = server.cmd(::redis::cmd("HGET").arg(key("errors")).arg(id)).await;
        assert!(
            recorded.contains(reason),
            "{id}: {recorded:?} should say {reason:?}"
        );
        let buried: Option<f64> = server.cmd(::redis::cmd("ZSCORE").arg(key("dead")).arg(id)).await;
        assert!(buried.is_some(), "{id} is in the dead-letter set");
    }
    // The ones with a valid id can be inspected: shown as undecodable, not crashed on.
    let info = queue
        .operator()
        .job(&redefer::queue::JobId::new("garbage").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(info.state, RawJobState::Dead { .. }));
    assert!(info.envelope.unwrap().is_err());
}

/// Another client moved jobs' due times before the epoch (`-inf`, a negative ms, a fraction):
/// they are due, and run, as jobs due at the epoch. (A claim's reply packs due times as
/// integers: one it could not pack stopped every claim of the queue.)
async fn jobs_due_before_the_epoch_run(kind: Server) {
    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges").unwrap();
    let delayed = format!("{}:q:{{charges}}:delayed", store.prefix().as_str());
    for (order, score) in [(1, "-inf"), (2, "-5"), (3, "0.5")] {
        let pushed = queue
            .push(&Charge { order }, Duration::from_secs(3600))
            .await
            .unwrap();
        let _: i64 = server
            .cmd(
                ::redis::cmd("ZADD")
                    .arg(&delayed)
                    .arg("XX")
                    .arg(score)
                    .arg(pushed.id.as_str()),
            )
            .await;
    }
    let (scheduler, handled) = recording_scheduler(store, &queue, quick());
    eventually(Duration::from_secs(10), "every job handled", || async {
        (handled.lock().unwrap().len() == 3).then_some(())
    })
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!(report.acked, 3);
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
}

async fn keys_of_the_wrong_type_are_store_errors_and_touch_nothing_else(kind: Server) {
    use redefer::{LockKey, LockToken, StoreError};

    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    // Another tool wrote a list where a lock lives, and a string where a queue's set lives.
    let _: i64 = server
        .cmd(
            ::redis::cmd("LPUSH")
                .arg(format!("{prefix}:lock:{{order:1}}"))
                .arg("x"),
        )
        .await;
    let _: () = server
        .cmd(
            ::redis::cmd("SET")
                .arg(format!("{prefix}:q:{{broken}}:delayed"))
                .arg("x"),
        )
        .await;

    let key = LockKey::new("order:1").unwrap();
    match store
        .try_acquire(&key, LockToken::random(), Duration::from_secs(5))
        .await
    {
        Err(StoreError::Redis(error)) => assert!(error.to_string().contains("WRONGTYPE"), "{error}"),
        other => panic!("expected a WRONGTYPE store error, got {other:?}"),
    }
    let broken = DelayQueue::<Charge, _>::new(store.clone(), "broken").unwrap();
    assert!(matches!(
        broken.claim(10, Duration::from_secs(5)).await,
        Err(redefer::queue::QueueError::Store(_))
    ));
    assert!(broken.push(&Charge { order: 1 }, Duration::ZERO).await.is_err());
    // A scheduler on the broken queue keeps running, and the healthy queue next to it works.
    let (stuck, _) = recording_scheduler(store.clone(), &broken, quick());
    let healthy = DelayQueue::<Charge, _>::new(store.clone(), "healthy").unwrap();
    healthy.push(&Charge { order: 2 }, Duration::ZERO).await.unwrap();
    let (scheduler, handled) = recording_scheduler(store, &healthy, quick());
    eventually(Duration::from_secs(5), "the healthy queue is handled", || async {
        (handled.lock().unwrap().as_slice() == [2]).then_some(())
    })
    .await;
    assert_eq!(stuck.shutdown().await.acked, 0);
    scheduler.shutdown().await;
}

async fn the_scheduler_carries_on_after_redis_is_killed_and_restarted_with_aof(kind: Server) {
    let mut server = RedisServer::start_with_of(kind, &RedisServer::AOF_ALWAYS);
    let store = server.fast_failing_store().await;
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges").unwrap();
    // Due later, so that they are still waiting when the server dies.
    for order in 0..50 {
        queue
            .push(&Charge { order }, Duration::from_millis(500))
            .await
            .unwrap();
    }
    let (scheduler, handled) = recording_scheduler(store, &queue, quick());
    server.kill();
    server.restart();
    for order in 50..60 {
        let pushed = eventually(
            Duration::from_secs(10),
            "pushes succeed once Redis is back",
            || {
                let queue = queue.clone();
                async move { queue.push(&Charge { order }, Duration::ZERO).await.ok() }
            },
        )
        .await;
        assert_eq!(pushed.id.as_str().len(), 32);
    }
    eventually(
        Duration::from_secs(15),
        "every job pushed, before and after the kill, is handled",
        || async {
            (handled
                .lock()
                .unwrap()
                .iter()
                .copied()
                .collect::<HashSet<_>>()
                .len()
                == 60)
                .then_some(())
        },
    )
    .await;
    scheduler.shutdown().await;
}

/// A Redis restart without persistence empties the queue registry (what `redefer queues`, the
/// command and the dashboard read); a running scheduler puts its queue back within 10 s, with
/// nothing pushed, also when it keeps no gauges (`stats_every` zero).
async fn a_running_scheduler_puts_its_queue_back_in_the_registry_after_redis_lost_it(kind: Server) {
    let mut server = RedisServer::start_with_of(kind, &["--save", "", "--appendonly", "no"]);
    let store = server.fast_failing_store().await;
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges").unwrap();
    let registered = || async {
        let queues = store.registered().await.ok()?;
        queues.iter().any(|queue| queue.name == "charges").then_some(())
    };
    let options = SchedulerOptions {
        stats_every: Duration::ZERO,
        ..quick()
    };
    let (scheduler, _) = recording_scheduler(store.clone(), &queue, options);
    eventually(
        Duration::from_secs(10),
        "the scheduler registered its queue",
        registered,
    )
    .await;
    server.restart();
    let lost: Vec<String> = server.cmd(::redis::cmd("KEYS").arg("*queues*")).await;
    assert!(lost.is_empty(), "the restart kept {lost:?}");
    eventually(
        Duration::from_secs(20),
        "the queue is registered again",
        registered,
    )
    .await;
    scheduler.shutdown().await;
}

async fn an_idle_scheduler_sends_only_a_few_commands_per_second(kind: Server) {
    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges").unwrap();
    let (scheduler, _) = recording_scheduler(store, &queue, SchedulerOptions::default());
    // Wait until it has started (its first claim and its first gauge refresh are two scripts,
    // and it has subscribed to its wake-ups: on a busy host the subscription can come after
    // both), then count what it sends over a quiet window.
    eventually(Duration::from_secs(10), "the scheduler has started", || async {
        let info: String = server.cmd(::redis::cmd("INFO").arg("commandstats")).await;
        let calls = |command: &str| -> u64 {
            info.lines()
                .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        (calls("evalsha") >= 2 && calls("subscribe") >= 1).then_some(())
    })
    .await;
    let _: () = server
        .cmd(&::redis::cmd("CONFIG").arg("RESETSTAT").to_owned())
        .await;
    let window = Duration::from_secs(3);
    tokio::time::sleep(window).await;
    let info: String = server.cmd(::redis::cmd("INFO").arg("commandstats")).await;
    scheduler.shutdown().await;
    // Per command: `cmdstat_<name>:calls=<n>,...`. Commands run inside our scripts count there
    // too; what the scheduler sends over the network is the EVALSHA calls.
    let calls: Vec<(String, u64)> = info
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.strip_prefix("calls=")?.split(',').next()?.parse().ok()?;
            Some((name.to_string(), calls))
        })
        .collect();
    let inside_scripts = [
        "time",
        "exists",
        "zrangebyscore",
        "zrange",
        "zcard",
        "zcount",
        "zadd",
        "zrem",
        "hset",
        "hget",
        "hmget",
        "hdel",
    ];
    // The test's own connection: Valkey (and Redis 7.2+) count the client's `CLIENT SETINFO`.
    let ours = ["info", "config|resetstat", "client|setinfo"];
    let sent: Vec<_> = calls
        .iter()
        .filter(|(name, _)| !inside_scripts.contains(&name.as_str()) && !ours.contains(&name.as_str()))
        .collect();
    let round_trips: u64 = sent.iter().map(|(_, n)| n).sum();
    assert!(
        sent.iter().all(|(name, _)| name == "evalsha"),
        "an idle scheduler sends only its claim script: {sent:?}"
    );
    // One claim per max_idle (1 s); pub/sub wake-ups cost nothing while nothing is pushed.
    let per_second = round_trips as f64 / window.as_secs_f64();
    assert!(
        per_second <= 1.5,
        "{round_trips} round trips in {window:?} while idle"
    );
}

async fn no_deferral_reported_to_a_caller_is_lost_when_redis_is_killed_mid_run(kind: Server) {
    use redefer::lock::Acquisition;
    use redefer::strategy::Defer;
    use redefer::{LockKey, LockToken, Outcome};
    use tower::ServiceExt;

    let mut server = RedisServer::start_with_of(kind, &RedisServer::AOF_ALWAYS);
    let store = server.fast_failing_store().await;
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges").unwrap();
    // Another process holds order 1 for the whole run: every request for it is deferred.
    let holder = LockToken::random();
    let key = LockKey::new("order:1").unwrap();
    assert!(matches!(
        store
            .try_acquire(&key, holder, Duration::from_secs(120))
            .await
            .unwrap(),
        Acquisition::Acquired(_)
    ));
    let (handler, handled) = recorder();
    // Requests are told apart by their order number; all lock the same key.
    let service = LockLayer::new(store.clone(), |_: &Charge| Some("order:1".to_string()))
        .on_conflict(Defer::new(queue.clone()))
        .layer(handler);
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(quick())
        .start();

    // Four callers keep deferring while Redis is killed under them.
    let reported: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let callers: Vec<_> = (0..4u64)
        .map(|caller| {
            let (service, reported) = (service.clone(), reported.clone());
            tokio::spawn(async move {
                for n in 0..60u64 {
                    let order = caller * 1000 + n;
                    match service.clone().oneshot(Charge { order }).await {
                        Ok(Outcome::Deferred(_)) => {
                            reported.lock().unwrap().insert(order);
                        }
                        Ok(other) => panic!("order {order} ran while the lock was held: {other:?}"),
                        // While Redis is down the caller is told so, and nothing was promised.
                        Err(_) => {}
                    }
                }
            })
        })
        .collect();
    eventually(Duration::from_secs(10), "the callers are mid-run", || async {
        (reported.lock().unwrap().len() >= 60).then_some(())
    })
    .await;
    server.kill();
    server.restart();
    for caller in callers {
        caller.await.unwrap();
    }
    let reported = reported.lock().unwrap().clone();
    assert!(
        reported.len() >= 120,
        "most requests were deferred ({} of 240)",
        reported.len()
    );
    // The holder lets go; every deferral reported must now be handled.
    eventually(
        Duration::from_secs(10),
        "the holder's lock survives the restart and is released",
        || {
            let store = store.clone();
            let key = key.clone();
            async move {
                store
                    .release(&key, holder)
                    .await
                    .ok()
                    .filter(|released| *released)
            }
        },
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "every reported deferral is handled",
        || async {
            let handled: HashSet<u64> = handled.lock().unwrap().iter().copied().collect();
            reported.is_subset(&handled).then_some(())
        },
    )
    .await;
    scheduler.shutdown().await;
}

/// In-flight jobs as redefer 0.2 stored them (an entry per job in `inflight`, the claimer's
/// token in `leases`) are read, listed and recovered by the claim's lease model; an `inflight`
/// entry whose job list in `claims` is not ours never fails a claim.
async fn in_flight_entries_of_redefer_0_2_and_foreign_claim_lists_are_handled(kind: Server) {
    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let key = |set: &str| format!("{}:q:{{old}}:{set}", store.prefix().as_str());
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "old").unwrap();
    let id = queue.push(&Charge { order: 1 }, Duration::ZERO).await.unwrap().id;
    let deadline_ms: i64 = 1_000; // long past
    let _: i64 = server
        .cmd(::redis::cmd("ZREM").arg(key("delayed")).arg(id.as_str()))
        .await;
    let _: i64 = server
        .cmd(
            ::redis::cmd("ZADD")
                .arg(key("inflight"))
                .arg(deadline_ms)
                .arg(id.as_str()),
        )
        .await;
    let _: i64 = server
        .cmd(
            ::redis::cmd("HSET")
                .arg(key("leases"))
                .arg(id.as_str())
                .arg("0123456789abcdef0123456789abcdef"),
        )
        .await;
    // A list that is not MessagePack, and one whose entries are not ids.
    for (lease, list) in [("feed:1", &b"\xc1 not msgpack"[..]), ("feed:2", &b"\x91\x01"[..])] {
        let _: i64 = server
            .cmd(
                ::redis::cmd("ZADD")
                    .arg(key("inflight"))
                    .arg(deadline_ms)
                    .arg(lease),
            )
            .await;
        let _: i64 = server
            .cmd(::redis::cmd("HSET").arg(key("claims")).arg(lease).arg(list))
            .await;
    }

    assert_eq!(
        queue.operator().stats().await.unwrap(),
        QueueStats {
            in_flight: 1,
            ..QueueStats::default()
        }
    );
    let info = queue.operator().job(&id).await.unwrap().unwrap();
    assert_eq!(
        info.state,
        RawJobState::InFlight {
            lease_until: std::time::UNIX_EPOCH + Duration::from_millis(1_000)
        }
    );
    let listed = queue
        .operator()
        .list_after(redefer::queue::JobSet::InFlight, None, 10)
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|job| job.id.as_str()).collect::<Vec<_>>(),
        [id.as_str()]
    );

    let claimed = queue.claim(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        claimed.jobs.len(),
        1,
        "the old lease ran out: the job is claimed again"
    );
    assert_eq!(claimed.jobs[0].envelope.id, id);
    assert!(queue.ack(&claimed.jobs[0].lease).await.unwrap());
    // The entries whose lists are not ours are read as entries of one job each, as 0.2 did:
    // no such job, so they are buried with that reason, where an operator sees them.
    assert_eq!(
        queue.operator().stats().await.unwrap(),
        QueueStats {
            dead: 2,
            ..QueueStats::default()
        }
    );
    let dead = queue
        .operator()
        .list_after(redefer::queue::JobSet::Dead, None, 10)
        .await
        .unwrap();
    assert_eq!(
        dead.iter().map(|job| job.id.as_str()).collect::<Vec<_>>(),
        ["feed:1", "feed:2"]
    );
    let left: i64 = server.cmd(::redis::cmd("ZCARD").arg(key("inflight"))).await;
    assert_eq!(left, 0, "every ended lease is gone");
}

/// An upgrade from 0.3 with jobs in flight: what a 0.3 scheduler's claims wrote (a claim's lease
/// `<token>:<first fence>` padded to 65 bytes, its ids in `claims` with a count of the jobs it
/// still holds under `<lease>#`, each job's holder in `leases`; a batch of one under a lease of
/// its own, named by the job's id) is read by this version: counted, listed and inspected as in
/// flight, and when those leases run out exactly the jobs they still held come back (not the one
/// 0.3 acked), to be claimed and acked by this version, leaving none of 0.3's records behind.
async fn jobs_a_0_3_scheduler_left_in_flight_are_recovered(kind: Server) {
    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let key = |set: &str| format!("{}:q:{{upgrade}}:{set}", store.prefix().as_str());
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "upgrade").unwrap();
    let mut ids = Vec::new();
    for order in 0..5 {
        ids.push(queue.push(&Charge { order }, Duration::ZERO).await.unwrap().id);
    }
    let deadline_ms: i64 = 1_000; // long past: the 0.3 scheduler is gone
    let token = "0123456789abcdef0123456789abcdef";
    let claim_lease = format!("{token}:7{}", ".".repeat(65 - token.len() - 2));
    let mut writes = ::redis::pipe();
    // A claim of three jobs, the third of which 0.3 acked (its bytes and holder gone).
    let batch = &ids[0..3];
    for id in batch {
        writes.zrem(key("delayed"), id.as_str());
    }
    writes
        .zadd(key("inflight"), &claim_lease, deadline_ms)
        .hset(key("claims"), &claim_lease, packed(batch))
        .hset(key("claims"), format!("{claim_lease}#"), 2)
        .hset(key("leases"), ids[0].as_str(), &claim_lease)
        .hset(key("leases"), ids[1].as_str(), &claim_lease)
        .hdel(key("jobs"), ids[2].as_str());
    // A batch of one, under a lease of its own.
    writes
        .zrem(key("delayed"), ids[3].as_str())
        .zadd(key("inflight"), ids[3].as_str(), deadline_ms)
        .hset(key("leases"), ids[3].as_str(), token)
        .set(key("fence"), 9);
    let () = writes
        .query_async(&mut store.connection())
        .await
        .expect("0.3's records");

    assert_eq!(
        queue.operator().stats().await.unwrap(),
        QueueStats {
            waiting: 1,
            due: 1,
            in_flight: 3,
            ..QueueStats::default()
        }
    );
    let listed = queue
        .operator()
        .list_after(redefer::queue::JobSet::InFlight, None, 10)
        .await
        .unwrap();
    let mut listed: Vec<&str> = listed.iter().map(|job| job.id.as_str()).collect();
    listed.sort();
    let mut held = vec![ids[0].as_str(), ids[1].as_str(), ids[3].as_str()];
    held.sort();
    assert_eq!(listed, held);
    for id in [&ids[0], &ids[3]] {
        assert_eq!(
            queue.operator().job(id).await.unwrap().unwrap().state,
            RawJobState::InFlight {
                lease_until: std::time::UNIX_EPOCH + Duration::from_millis(1_000)
            }
        );
    }

    let claimed = queue.claim(10, Duration::from_secs(30)).await.unwrap();
    let mut back: Vec<&str> = claimed.jobs.iter().map(|job| job.envelope.id.as_str()).collect();
    back.sort();
    let mut expected = vec![ids[0].as_str(), ids[1].as_str(), ids[3].as_str(), ids[4].as_str()];
    expected.sort();
    assert_eq!(back, expected, "the jobs 0.3 left held, and the waiting one");
    assert!(
        claimed.jobs.iter().all(|job| job.lease.fence().0 > 9),
        "fences go on from 0.3's"
    );
    let leases: Vec<_> = claimed.jobs.iter().map(|job| &job.lease).collect();
    assert_eq!(queue.ack_many(&leases).await.unwrap(), [true; 4]);
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
    for set in ["inflight", "claims", "leases", "jobs", "expiries"] {
        let left: i64 = server.cmd(::redis::cmd("EXISTS").arg(key(set))).await;
        assert_eq!(left, 0, "{set} is gone");
    }
}

/// The count of held jobs (`claims` field `held`, read by `stats`) is for people: a value another
/// client broke costs the count, never a claim or an ack.
async fn a_broken_count_of_held_jobs_stops_no_claim(kind: Server) {
    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let claims = format!("{}:q:{{counted}}:claims", store.prefix().as_str());
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "counted").unwrap();
    queue.push(&Charge { order: 1 }, Duration::ZERO).await.unwrap();
    let _: i64 = server
        .cmd(::redis::cmd("HSET").arg(&claims).arg("held").arg("not a number"))
        .await;
    let claimed = queue.claim(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(claimed.jobs.len(), 1);
    assert!(queue.ack(&claimed.jobs[0].lease).await.unwrap());
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
}

/// A job whose lease ran out comes back although another client broke its count of lease
/// expiries (not a number): the claim that counted it failed ("hash value is not an integer"),
/// and so did every claim of the queue after it, the healthy jobs' too. The broken count
/// counts as the first expiry.
async fn a_broken_count_of_lease_expiries_stops_no_claim(kind: Server) {
    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let expiries = format!("{}:q:{{expiring}}:expiries", store.prefix().as_str());
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "expiring").unwrap();
    queue.push(&Charge { order: 1 }, Duration::ZERO).await.unwrap();
    let first = queue.claim(10, Duration::from_millis(50)).await.unwrap();
    let id = first.jobs[0].lease.id().as_str().to_string();
    let _: i64 = server
        .cmd(::redis::cmd("HSET").arg(&expiries).arg(&id).arg("not a number"))
        .await;
    queue.push(&Charge { order: 2 }, Duration::ZERO).await.unwrap();
    let orders = std::cell::RefCell::new(Vec::new());
    eventually(Duration::from_secs(5), "both jobs claimed", || async {
        let claimed = queue.claim(10, Duration::from_secs(30)).await.unwrap();
        for job in &claimed.jobs {
            orders.borrow_mut().push(job.envelope.payload.order);
            assert!(queue.ack(&job.lease).await.unwrap());
        }
        (orders.borrow().len() == 2).then_some(())
    })
    .await;
    let mut orders = orders.into_inner();
    orders.sort_unstable();
    assert_eq!(orders, [1, 2]);
    let counted: Option<String> = server.cmd(::redis::cmd("HGET").arg(&expiries).arg(&id)).await;
    assert_eq!(counted, None, "the ack forgets the count");
}

/// A MessagePack array of job ids, as 0.3's claim packed them (`cmsgpack.pack`).
fn packed(ids: &[redefer::queue::JobId]) -> Vec<u8> {
    let mut bytes = vec![0x90 | u8::try_from(ids.len()).expect("a short list")];
    for id in ids {
        let id = id.as_str().as_bytes();
        match u8::try_from(id.len()).expect("an id of under 256 bytes") {
            len @ 0..32 => bytes.push(0xa0 | len),
            len => bytes.extend([0xd9, len]),
        }
        bytes.extend_from_slice(id);
    }
    bytes
}

/// A scheduler shut down while a claim of its is on its way hands that claim's jobs back: the
/// claim's script runs on the server whether or not the scheduler still waits for its answer.
/// The server is paused (`CLIENT PAUSE`) under a busy scheduler (400 at once, batches of 100,
/// as a rolling deploy sees it) so that a claim is on its way when `shutdown` is called; once
/// the pause ends, no job may be left in flight.
async fn a_claim_on_its_way_at_shutdown_is_handed_back(kind: Server) {
    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges").unwrap();
    let charges: Vec<Charge> = (0..3_000).map(|order| Charge { order }).collect();
    for chunk in charges.chunks(500) {
        queue.push_many(chunk, Duration::ZERO).await.unwrap();
    }
    let finished = Arc::new(tokio::sync::Notify::new());
    let service = {
        let finished = Arc::clone(&finished);
        LockLayer::new(store.clone(), by_order).layer(service_fn(move |_: Charge| {
            let finished = Arc::clone(&finished);
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                finished.notify_one();
                Ok::<_, std::convert::Infallible>(())
            }
        }))
    };
    let options = SchedulerOptions {
        concurrency: 400,
        batch: 100,
        lease: Duration::from_secs(30),
        shutdown_grace: Duration::from_secs(1),
        ..quick()
    };
    let scheduler = Scheduler::new(queue.clone(), service).options(options).start();
    // Under way: handlers finish, their slots free, claims follow.
    finished.notified().await;
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut pauser = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = ::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(800)
        .arg("ALL")
        .query_async(&mut pauser)
        .await
        .unwrap();
    // Handlers that end during the pause free slots at once; the next claim (within the 1 ms
    // gathering window) goes out and waits behind the pause.
    finished.notified().await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let report = scheduler.shutdown().await;
    // Answered only once the pause is over.
    let _: String = ::redis::cmd("PING").query_async(&mut pauser).await.unwrap();
    let stats = queue.operator().stats().await.unwrap();
    assert_eq!(
        stats.in_flight, 0,
        "jobs left in flight after shutdown returned: {stats:?}, {report:?}"
    );
    assert_eq!(
        stats.waiting + report.acked,
        3_000,
        "every job ran once or waits: {stats:?}, {report:?}"
    );
}

/// A queue with no job ready keeps no groups' turns (its `group-tags`, as the guide's key
/// table says): not after a purge of its waiting jobs, nor after a claim of its last ready
/// job, nor after its last ready job is cancelled. Before, the tags stayed until the next job
/// became ready (`tenant-a 1000` after a purge).
async fn a_queue_with_no_job_ready_keeps_no_groups_turns(kind: Server) {
    use redefer::queue::{JobGroup, JobSet};

    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let tags = format!("{}:q:{{jobs}}:group-tags", store.prefix().as_str());
    let queue = DelayQueue::<u32, _>::new(store, "jobs").unwrap();
    let tenant = |name: &str| queue.in_group(JobGroup::new(name).unwrap());
    let kept = async || -> bool { server.cmd::<i64>(::redis::cmd("EXISTS").arg(&tags)).await == 1 };

    tenant("tenant-a")
        .push_many(&(0..1000).collect::<Vec<u32>>(), Duration::ZERO)
        .await
        .unwrap();
    tenant("tenant-b").push(&1, Duration::ZERO).await.unwrap();
    // A claim makes the due jobs ready, in their groups' turns.
    let claimed = queue.claim(1, Duration::from_secs(60)).await.unwrap();
    assert!(kept().await, "{tags} holds the turns while jobs are ready");
    assert_eq!(queue.operator().purge(JobSet::Waiting).await.unwrap(), 1000);
    assert!(!kept().await, "no job is ready after the purge");
    queue.ack(&claimed.jobs[0].lease).await.unwrap();

    tenant("tenant-a")
        .push_many(&[1, 2], Duration::ZERO)
        .await
        .unwrap();
    let first = queue.claim(1, Duration::from_secs(60)).await.unwrap();
    assert!(kept().await);
    let last = queue.claim(1, Duration::from_secs(60)).await.unwrap();
    assert_eq!(last.jobs.len(), 1);
    assert!(!kept().await, "the claim took the last ready job");

    let ids = tenant("tenant-a")
        .push_many(&[3, 4], Duration::ZERO)
        .await
        .unwrap();
    let third = queue.claim(1, Duration::from_secs(60)).await.unwrap();
    let waiting = ids
        .iter()
        .find(|scheduled| scheduled.id != *third.jobs[0].lease.id())
        .expect("one of the two waits");
    assert_eq!(
        queue.cancel(&waiting.id).await.unwrap(),
        redefer::queue::Cancelled::Deleted
    );
    assert!(!kept().await, "the last ready job was cancelled");
    for claimed in [first, last, third] {
        queue.ack(&claimed.jobs[0].lease).await.unwrap();
    }
}

/// A queue's fencing counter that another tool set past 2^53 (the largest token a script
/// counts exactly) fails the claim with an error naming it, before any job leaves the waiting
/// set: the jobs wait, the counter is kept as it was, and once it is deleted the jobs are
/// claimed with tokens from the clock. Before, the claim counted on from it and handed the
/// jobs out with tokens that wrapped past 2^63 to a negative number.
async fn a_fencing_counter_past_what_a_token_can_be_fails_the_claim_and_loses_no_job(kind: Server) {
    use redefer::queue::JobGroup;

    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    // A queue without groups, and one whose jobs take turns by group (its claim takes them
    // from the ready set).
    for (name, group) in [("charges", None), ("tenants", Some("tenant-a"))] {
        let mut queue = DelayQueue::<Charge, _>::new(store.clone(), name).unwrap();
        if let Some(group) = group {
            queue = queue.in_group(JobGroup::new(group).unwrap());
        }
        for order in 1..=3 {
            queue.push(&Charge { order }, Duration::ZERO).await.unwrap();
        }
        let counter = format!("{prefix}:q:{{{name}}}:fence");
        let held = "99999999999999999999999";
        let _: () = server.cmd(::redis::cmd("SET").arg(&counter).arg(held)).await;

        let said = match queue.claim(10, Duration::from_secs(30)).await {
            Err(redefer::queue::QueueError::Store(error)) => error.to_string(),
            other => panic!("{name}: expected the claim to fail, got {other:?}"),
        };
        assert!(
            said.contains(&counter) && said.contains("2^53") && !said.contains("script:"),
            "{said}"
        );
        let stats = queue.operator().stats().await.unwrap();
        assert_eq!((stats.waiting, stats.in_flight), (3, 0), "{name}: {stats:?}");
        let kept: String = server.cmd(::redis::cmd("GET").arg(&counter)).await;
        assert_eq!(kept, held, "{name}");

        let _: () = server.cmd(::redis::cmd("DEL").arg(&counter)).await;
        let claimed = queue.claim(10, Duration::from_secs(30)).await.unwrap();
        assert_eq!(claimed.jobs.len(), 3, "{name}");
        for job in &claimed.jobs {
            let fence = job.lease.fence().0;
            assert!(fence < 1 << 53, "{name}: {fence}");
        }
    }
}

for_each_server!(
    a_fencing_counter_past_what_a_token_can_be_fails_the_claim_and_loses_no_job,
    a_queue_with_no_job_ready_keeps_no_groups_turns,
    a_claim_on_its_way_at_shutdown_is_handed_back,
    entries_written_by_other_clients_are_buried_with_a_reason_and_the_rest_run,
    keys_of_the_wrong_type_are_store_errors_and_touch_nothing_else,
    the_scheduler_carries_on_after_redis_is_killed_and_restarted_with_aof,
    an_idle_scheduler_sends_only_a_few_commands_per_second,
    a_running_scheduler_puts_its_queue_back_in_the_registry_after_redis_lost_it,
    no_deferral_reported_to_a_caller_is_lost_when_redis_is_killed_mid_run,
    in_flight_entries_of_redefer_0_2_and_foreign_claim_lists_are_handled,
    jobs_a_0_3_scheduler_left_in_flight_are_recovered,
    a_broken_count_of_held_jobs_stops_no_claim,
    a_broken_count_of_lease_expiries_stops_no_claim,
    jobs_due_before_the_epoch_run,
);
