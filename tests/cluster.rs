//! redefer on a real Redis Cluster (3 masters; 3 more replicas for the failover test), started
//! by the harness: no CROSSSLOT errors, sharded queues spread over the masters, exactly-once
//! claiming, deferral end to end, and a scheduler that carries on through a failover.

#[path = "support/client_log.rs"]
mod client_log;
use crate::support;

use crate::support::Shorthand;
use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redefer::debounce::{Debounce, DebounceLayer};
use redefer::guard::LineCap;
use redefer::lock::{Acquisition, current_locks};
use redefer::lock_set::LockSetLayer;
use redefer::queue::QueueStats;
use redefer::queue::{DelayQueue, GroupWaiting, JobGroup};
use redefer::read_write::{Access, ReadWriteLayer};
use redefer::store::ManagedClusterConnection;
use redefer::strategy::{Coalesce, Defer, Retry, Supersede};
use redefer::throttle::{Rate, ThrottleLayer, ThrottleStore};
use redefer::{
    Backoff, LockKey, LockLayer, LockToken, Outcome, RedisStore, Scheduler, SchedulerOptions, current_lock,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tower::{Layer, ServiceExt, service_fn};

use support::{RedisCluster, Server, eventually, for_each_server, unique_prefix};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Charge {
    order: u64,
    job: u64,
}

fn by_order(charge: &Charge) -> Option<String> {
    Some(format!("order:{}", charge.order))
}

async fn cluster_store(cluster: &RedisCluster) -> RedisStore<ManagedClusterConnection> {
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    RedisStore::builder()
        .prefix(unique_prefix())
        .unwrap()
        .response_timeout(Duration::from_millis(500))
        .connection_timeout(Duration::from_millis(500))
        .connect_cluster(&nodes)
        .await
        .expect("connect to the cluster")
}

fn quick() -> SchedulerOptions {
    SchedulerOptions {
        max_idle: Duration::from_millis(200),
        ..SchedulerOptions::default()
    }
}

async fn the_lock_layer_and_a_deferral_work_on_a_cluster(kind: Server) {
    let cluster = RedisCluster::start_of(kind, 3, 0);
    let store = cluster_store(&cluster).await;

    // Mutual exclusion and fencing through the layer.
    let inside = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let (inside_, fences_) = (inside.clone(), fences.clone());
    let exclusive = LockLayer::new(store.clone(), by_order)
        .on_conflict(
            Retry::new(Backoff::exponential(
                Duration::from_millis(1),
                Duration::from_millis(5),
            ))
            .max_attempts(u32::MAX)
            .max_wait(Duration::from_secs(30)),
        )
        .layer(service_fn(move |_: Charge| {
            let (inside, fences) = (inside_.clone(), fences_.clone());
            async move {
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two handlers inside at once"
                );
                fences.lock().unwrap().push(current_lock().unwrap().fence);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Infallible>(())
            }
        }));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let service = exclusive.clone();
            tokio::spawn(async move {
                for job in 0..10 {
                    let outcome = service.clone().oneshot(Charge { order: 1, job }).await.unwrap();
                    assert!(outcome.done().is_some());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let fences = fences.lock().unwrap().clone();
    assert_eq!(fences.len(), 80);
    assert!(fences.windows(2).all(|w| w[0] < w[1]));

    // A deferral, re-injected by a scheduler, on a sharded queue.
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges")
        .unwrap()
        .shards(3)
        .unwrap();
    let (handled_tx, mut handled) = mpsc::unbounded_channel();
    let service = LockLayer::new(store.clone(), by_order)
        .on_conflict(Defer::new(queue.clone()))
        .layer(service_fn(move |charge: Charge| {
            let handled_tx = handled_tx.clone();
            async move {
                handled_tx.send(charge.job).unwrap();
                Ok::<_, Infallible>(())
            }
        }));
    let holder = LockToken::random();
    let key = LockKey::new("order:2").unwrap();
    assert!(matches!(
        store
            .try_acquire(&key, holder, Duration::from_secs(60))
            .await
            .unwrap(),
        Acquisition::Acquired(_)
    ));
    let Ok(Outcome::Deferred(deferred)) = service.clone().oneshot(Charge { order: 2, job: 7 }).await else {
        panic!("expected a deferral");
    };
    assert!(queue.operator().job(&deferred.job_id).await.unwrap().is_some());
    let scheduler = Scheduler::new(queue.clone(), service).options(quick()).start();
    assert!(store.release(&key, holder).await.unwrap());
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), handled.recv())
            .await
            .unwrap(),
        Some(7)
    );
    eventually(Duration::from_secs(10), "acked", || async {
        (queue.operator().stats().await.unwrap() == QueueStats::default()).then_some(())
    })
    .await;
    assert_eq!(scheduler.shutdown().await.acked, 1);
}

async fn the_shards_of_a_queue_land_on_different_masters(kind: Server) {
    let cluster = RedisCluster::start_of(kind, 3, 0);
    let store = cluster_store(&cluster).await;
    let queue = DelayQueue::<u64, _>::new(store.clone(), "orders")
        .unwrap()
        .shards(3)
        .unwrap();
    let masters: HashSet<u16> = queue
        .shard_names()
        .iter()
        .map(|shard| cluster.master_of(&format!("{}:q:{{{shard}}}:delayed", store.prefix().as_str())))
        .collect();
    assert_eq!(masters.len(), 3, "each shard on its own master");
    for n in 0..300 {
        queue.push(&n, Duration::from_secs(60)).await.unwrap();
    }
    assert_eq!(queue.operator().stats().await.unwrap().waiting, 300);
}

async fn concurrent_claimers_on_a_sharded_cluster_queue_receive_each_job_once(kind: Server) {
    const JOBS: usize = 3000;
    let cluster = RedisCluster::start_of(kind, 3, 0);
    let store = cluster_store(&cluster).await;
    let queue = DelayQueue::<u64, _>::new(store, "claims")
        .unwrap()
        .shards(3)
        .unwrap();
    let mut pushed = HashSet::new();
    for n in 0..JOBS {
        pushed.insert(queue.push(&(n as u64), Duration::ZERO).await.unwrap().id);
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let claimers: Vec<_> = (0..8)
        .map(|_| {
            let (queue, seen) = (queue.clone(), seen.clone());
            tokio::spawn(async move {
                loop {
                    let claimed = queue.claim(48, Duration::from_secs(30)).await.unwrap();
                    if claimed.jobs.is_empty() && claimed.next_in.is_none_or(|next| next > Duration::ZERO) {
                        return;
                    }
                    for job in claimed.jobs {
                        seen.lock().unwrap().push(job.envelope.id.clone());
                        assert!(queue.ack(&job.lease).await.unwrap());
                    }
                }
            })
        })
        .collect();
    for claimer in claimers {
        claimer.await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), JOBS, "each job delivered once");
    assert_eq!(seen.into_iter().collect::<HashSet<_>>(), pushed);
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
}

/// How a master is taken away in a failover test.
#[derive(Debug, Clone, Copy)]
enum MasterFault {
    /// SIGKILL: its connections are reset.
    Killed,
    /// SIGSTOP: its connections stay open and answer nothing, as a master whose host is gone
    /// without a reset.
    Frozen,
}

async fn a_scheduler_carries_on_through_a_master_failover(kind: Server) {
    a_scheduler_carries_on_through_a_failover_of(kind, MasterFault::Killed).await;
}

async fn a_scheduler_carries_on_through_the_failover_of_a_master_gone_silent(kind: Server) {
    a_scheduler_carries_on_through_a_failover_of(kind, MasterFault::Frozen).await;
}

async fn a_scheduler_carries_on_through_a_failover_of(kind: Server, fault: MasterFault) {
    const JOBS: u64 = 300;
    client_log::keep();
    let mut cluster = RedisCluster::start_of(kind, 3, 1);
    let store = cluster_store(&cluster).await;
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "failover")
        .unwrap()
        .shards(3)
        .unwrap();
    for job in 0..JOBS {
        // Due over 3 s: some before the failover, some during it, some after.
        let delay = Duration::from_millis(job * 10);
        queue.push(&Charge { order: job, job }, delay).await.unwrap();
    }
    // Replication is asynchronous: make sure the replicas have every job before a master dies.
    // (WAIT goes to every master; the smallest count comes back. Short waits, retried, stay
    // under the connection's response timeout while fresh replicas finish their first sync.)
    eventually(
        Duration::from_secs(20),
        "every master's replica has the jobs",
        || async {
            let mut conn = store.connection();
            let acked: Result<i64, _> = ::redis::cmd("WAIT").arg(1).arg(200).query_async(&mut conn).await;
            acked.ok().filter(|&acked| acked >= 1)
        },
    )
    .await;

    let handled: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let record = handled.clone();
    let service = LockLayer::new(store.clone(), by_order).layer(service_fn(move |charge: Charge| {
        let record = record.clone();
        async move {
            record.lock().unwrap().insert(charge.job);
            Ok::<_, Infallible>(())
        }
    }));
    let options = SchedulerOptions {
        lease: Duration::from_secs(3),
        ..quick()
    };
    let scheduler = Scheduler::new(queue.clone(), service).options(options).start();
    eventually(Duration::from_secs(10), "the scheduler is under way", || async {
        (handled.lock().unwrap().len() >= 50).then_some(())
    })
    .await;
    let victim = cluster.master_of(&format!(
        "{}:q:{{{}}}:delayed",
        store.prefix().as_str(),
        queue.shard_names()[0]
    ));
    match fault {
        MasterFault::Killed => cluster.kill(victim),
        MasterFault::Frozen => cluster.freeze(victim),
    }
    log::info!(target: "redis_failover_test", "{fault:?} the master on port {victim}");
    // Polls the nodes with redis-cli for a second or two: off the runtime's workers' queue.
    tokio::task::block_in_place(|| cluster.wait_until_failed_over(victim, Duration::from_secs(30)));
    log::info!(target: "redis_failover_test", "the cluster has failed the master over");
    let every_job = async {
        while handled.lock().unwrap().len() as u64 != JOBS {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(60), every_job)
        .await
        .is_err()
    {
        // What a failure needs to be understood: which jobs, where the queue holds them, what
        // the scheduler met.
        let missing: Vec<u64> = (0..JOBS)
            .filter(|job| !handled.lock().unwrap().contains(job))
            .collect();
        let stats = queue.operator().stats().await;
        let report = scheduler.shutdown().await;
        panic!(
            "not within 60s: every job handled, at least once, after the failover; {} missing: {missing:?}; the queue: {stats:?}; the scheduler: {report:?}; what the cluster client logged last (both servers' tests in this process):\n{}",
            missing.len(),
            client_log::latest()
        );
    }
    scheduler.shutdown().await;
}

async fn the_locks_of_every_master_are_listed(kind: Server) {
    let cluster = RedisCluster::start_of(kind, 3, 0);
    let store = cluster_store(&cluster).await;
    // Enough keys that every master holds some (the slots spread them).
    let keys: HashSet<String> = (0..30).map(|n| format!("order:{n}")).collect();
    for key in &keys {
        let taken = store
            .try_acquire(
                &LockKey::new(key.as_str()).unwrap(),
                LockToken::random(),
                Duration::from_secs(60),
            )
            .await
            .unwrap();
        assert!(matches!(taken, Acquisition::Acquired(_)));
    }
    let listed: HashSet<String> = store
        .cluster_locks(1_000)
        .await
        .unwrap()
        .into_iter()
        .map(|lock| lock.key)
        .collect();
    assert_eq!(listed, keys, "a SCAN of one node would see a third");
    assert_eq!(store.cluster_locks(7).await.unwrap().len(), 7, "the limit holds");
    // The footprint counts every master's keys too: 30 locks and their 30 counters, each to
    // expire.
    let footprint = store.cluster_footprint(100_000).await.unwrap();
    assert!(footprint.complete, "{footprint:?}");
    assert_eq!(footprint.kinds["lock"].keys, 30, "{footprint:?}");
    assert_eq!(footprint.kinds["fence"].keys, 30, "{footprint:?}");
    assert_eq!(footprint.unbounded(), 0, "{footprint:?}");
}

/// A throttle per customer over a semaphore per order (2 permits), both deferring to one
/// sharded queue, on customers and orders spread over the masters: every charge runs once,
/// with no CROSSSLOT error, and the listing of every master shows the throttled keys.
async fn the_throttle_and_the_semaphore_work_on_a_cluster(kind: Server) {
    let cluster = RedisCluster::start_of(kind, 3, 0);
    let store = cluster_store(&cluster).await;
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges")
        .unwrap()
        .shards(3)
        .unwrap();
    let handled = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let handled = Arc::clone(&handled);
        service_fn(move |charge: Charge| {
            let handled = Arc::clone(&handled);
            async move {
                handled.lock().unwrap().push(charge.job);
                Ok::<_, Infallible>(())
            }
        })
    };
    let service = tower::ServiceBuilder::new()
        .layer(
            ThrottleLayer::new(
                store.clone(),
                |charge: &Charge| Some(format!("customer:{}", charge.job % 6)),
                Rate::per_second(20).unwrap(),
            )
            .on_conflict(Defer::new(queue.clone()))
            .over_guard(),
        )
        .layer(
            LockLayer::new(store.clone(), by_order)
                .permits(2)
                .on_conflict(Defer::new(queue.clone())),
        )
        .service(handler);
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(quick())
        .start();
    for job in 0..36 {
        let outcome = service.clone().oneshot(Charge { order: job % 4, job }).await;
        assert!(outcome.is_ok(), "charge {job}: {outcome:?}");
    }
    let throttled: HashSet<String> = store
        .cluster_locks(1_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|entry| entry.next_slot.is_some())
        .map(|entry| entry.key)
        .collect();
    assert_eq!(
        throttled.len(),
        6,
        "every customer's schedule, from every master: {throttled:?}"
    );
    eventually(
        Duration::from_secs(20),
        "every charge handled and acked",
        || async {
            (handled.lock().unwrap().len() >= 36
                && queue.operator().stats().await.unwrap() == QueueStats::default())
            .then_some(())
        },
    )
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!((report.retried, report.buried), (0, 0), "{report:?}");
    let mut jobs = handled.lock().unwrap().clone();
    jobs.sort();
    assert_eq!(jobs, (0..36).collect::<Vec<u64>>(), "each charge once");
}

/// The policies for what waits on a 3-master cluster, queue sharded over the masters: a burst
/// coalesced into one job per key, a capped line dropping the oldest, a debounce, and a
/// superseded holder (the stop request published through the cluster): no CROSSSLOT, each
/// key's newest payload runs once.
async fn the_policies_for_what_waits_work_on_a_cluster(kind: Server) {
    let cluster = RedisCluster::start_of(kind, 3, 0);
    let store = cluster_store(&cluster).await;
    let queue = DelayQueue::<Charge, _>::new(store.clone(), "syncs")
        .unwrap()
        .shards(3)
        .unwrap();
    let handled = Arc::new(Mutex::new(Vec::new()));
    let service = {
        let handled = Arc::clone(&handled);
        LockLayer::new(store.clone(), by_order)
            .on_conflict(Coalesce::latest(queue.clone()))
            .layer(service_fn(move |charge: Charge| {
                let handled = Arc::clone(&handled);
                async move {
                    handled.lock().unwrap().push((charge.order, charge.job));
                    Ok::<_, Infallible>(())
                }
            }))
    };
    // Six keys, spread over the masters, each held while ten requests arrive.
    let mut holders = Vec::new();
    for order in 0..6 {
        let token = LockToken::random();
        let key = LockKey::new(format!("order:{order}")).unwrap();
        assert!(matches!(
            store
                .try_acquire(&key, token, Duration::from_secs(30))
                .await
                .unwrap(),
            Acquisition::Acquired(_)
        ));
        holders.push((key, token));
    }
    let mut newest = std::collections::BTreeMap::new();
    for job in 0..60 {
        let order = job % 6;
        let outcome = service.clone().oneshot(Charge { order, job }).await.unwrap();
        let deferred = outcome.deferred().cloned().unwrap();
        assert_eq!(deferred.revision, job / 6 + 1);
        newest.insert(order, job);
    }
    assert_eq!(queue.operator().stats().await.unwrap().waiting, 6);
    // A capped line on order 0 drops its coalesced job for a newer request.
    let capped = LockLayer::new(store.clone(), by_order)
        .on_conflict(Defer::new(queue.clone()).max_waiting(LineCap::new(1).drop_oldest()))
        .layer(service_fn(|_: Charge| async { Ok::<_, Infallible>(()) }));
    assert!(
        capped
            .oneshot(Charge { order: 0, job: 100 })
            .await
            .unwrap()
            .deferred()
            .is_some()
    );
    assert_eq!(queue.operator().stats().await.unwrap().dead, 1);
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(quick())
        .start();
    for (key, token) in &holders {
        assert!(store.release(key, *token).await.unwrap());
    }
    eventually(Duration::from_secs(20), "every key's job ran", || async {
        (queue.operator().stats().await.unwrap().waiting == 0 && handled.lock().unwrap().len() >= 6)
            .then_some(())
    })
    .await;
    scheduler.shutdown().await;
    let mut ran = handled.lock().unwrap().clone();
    ran.sort();
    let mut expected: Vec<(u64, u64)> = newest.into_iter().filter(|(order, _)| *order != 0).collect();
    expected.insert(0, (0, 100));
    assert_eq!(ran, expected, "each key's newest request, once");

    // A debounce, and a superseded holder.
    let debounce = Debounce::new(Duration::from_millis(30), Duration::from_secs(1)).unwrap();
    let debounced = DebounceLayer::new(queue.clone(), by_order, debounce)
        .layer(service_fn(|_: Charge| async { Ok::<_, Infallible>(()) }));
    let first = debounced
        .clone()
        .oneshot(Charge { order: 7, job: 1 })
        .await
        .unwrap();
    let second = debounced.oneshot(Charge { order: 7, job: 2 }).await.unwrap();
    assert_eq!(
        first.deferred().unwrap().job_id,
        second.deferred().unwrap().job_id
    );
    let (holding_tx, mut holding) = mpsc::unbounded_channel();
    let superseding = LockLayer::new(store.clone(), by_order)
        .on_conflict(Supersede::new())
        .layer(service_fn(move |charge: Charge| {
            let holding_tx = holding_tx.clone();
            async move {
                if charge.job == 0 {
                    let lock = current_lock().unwrap();
                    holding_tx.send(charge.order).unwrap();
                    lock.superseded().await;
                }
                Ok::<_, Infallible>(charge.job)
            }
        }));
    for order in 10..13 {
        let older = tokio::spawn(superseding.clone().oneshot(Charge { order, job: 0 }));
        assert_eq!(holding.recv().await, Some(order));
        let newer = superseding
            .clone()
            .oneshot(Charge { order, job: 1 })
            .await
            .unwrap();
        assert_eq!(newer.done(), Some(1));
        assert_eq!(older.await.unwrap().unwrap().done(), Some(0));
    }
}

/// Sets of keys on several slots (and masters) are taken slot by slot in slot order: sets
/// that overlap, in any order of their keys, never overlap inside and never deadlock; each key
/// is held with its own fence.
async fn sets_of_keys_on_several_slots_never_overlap_nor_deadlock_on_a_cluster(kind: Server) {
    const KEYS: [&str; 4] = ["acct:1", "acct:2", "acct:3", "acct:4"];
    let cluster = RedisCluster::start_of(kind, 3, 0);
    let store = cluster_store(&cluster).await;
    let masters: HashSet<u16> = KEYS.iter().map(|key| cluster.master_of(key)).collect();
    assert!(masters.len() > 1, "the keys are spread over the masters");
    let inside: Arc<Mutex<HashSet<String>>> = Arc::default();
    let overlaps = Arc::new(AtomicUsize::new(0));
    let sets = LockSetLayer::new(store.clone(), |names: &Vec<String>| Some(names.clone()))
        .on_conflict(
            Retry::new(Backoff::exponential(
                Duration::from_millis(2),
                Duration::from_millis(20),
            ))
            .max_attempts(u32::MAX)
            .max_wait(Duration::from_secs(60)),
        )
        .layer(service_fn({
            let (inside, overlaps) = (Arc::clone(&inside), Arc::clone(&overlaps));
            move |names: Vec<String>| {
                let (inside, overlaps) = (Arc::clone(&inside), Arc::clone(&overlaps));
                async move {
                    let fences = current_locks().iter().filter(|held| held.fence.is_some()).count();
                    assert_eq!(fences, names.len(), "a fence per key");
                    for name in &names {
                        if !inside.lock().unwrap().insert(name.clone()) {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    for name in &names {
                        inside.lock().unwrap().remove(name);
                    }
                    Ok::<_, Infallible>(())
                }
            }
        }));
    let mut calls = Vec::new();
    for n in 0..40usize {
        // Every pair of keys and every triple, in both orders of their first two keys.
        let mut names: Vec<String> = KEYS
            .iter()
            .cycle()
            .skip(n % 4)
            .take(2 + n % 2)
            .map(|k| k.to_string())
            .collect();
        if n % 3 == 0 {
            names.swap(0, 1);
        }
        let sets = sets.clone();
        calls.push(tokio::spawn(async move { sets.oneshot(names).await.map(|_| ()) }));
    }
    let all = async {
        for call in calls {
            if let Err(error) = call.await.unwrap() {
                panic!("{error:?}");
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("every request ends: no deadlock");
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a key had two requests inside"
    );
}

/// Readers and writers of documents on every master: a writer never has company, readers
/// share, every request ends (each key's permits share its hash tag: one script each).
/// Fair shares on a sharded queue over a cluster: a small tenant's jobs come in the first
/// claims of every shard despite a large tenant's backlog, each job once, and the groups are
/// listed over the shards.
async fn groups_share_a_sharded_queue_on_a_cluster(kind: Server) {
    let cluster = RedisCluster::start_of(kind, 3, 0);
    let store = cluster_store(&cluster).await;
    let queue = DelayQueue::<u64, _>::new(store, "tenants")
        .unwrap()
        .shards(3)
        .unwrap();
    let big: Vec<u64> = (0..1_500).collect();
    queue
        .in_group(JobGroup::new("a").unwrap())
        .push_many(&big, Duration::ZERO)
        .await
        .unwrap();
    let small: Vec<u64> = (10_000..10_006).collect();
    queue
        .in_group(JobGroup::new("b").unwrap())
        .push_many(&small, Duration::ZERO)
        .await
        .unwrap();
    let groups = queue.operator().groups(10).await.unwrap();
    assert_eq!(
        groups.largest,
        [GroupWaiting::new("a", 1_500), GroupWaiting::new("b", 6)]
    );
    // A claim takes up to its batch from each shard in turn: B's six come within the first
    // claims, while A's backlog is still nearly whole.
    let mut seen = HashSet::new();
    let mut of_b = 0;
    for _ in 0..4 {
        for job in queue.claim(12, Duration::from_secs(30)).await.unwrap().jobs {
            assert!(seen.insert(job.envelope.payload), "claimed once");
            of_b += usize::from(job.envelope.payload >= 10_000);
            assert!(queue.ack(&job.lease).await.unwrap());
        }
    }
    assert_eq!(of_b, 6, "B's jobs in the first {} claimed", seen.len());
    assert!(seen.len() <= 48, "{}", seen.len());
}

async fn readers_and_writers_work_on_a_cluster(kind: Server) {
    const DOCS: [&str; 4] = ["doc:1", "doc:2", "doc:3", "doc:4"];
    let cluster = RedisCluster::start_of(kind, 3, 0);
    let store = cluster_store(&cluster).await;
    let masters: HashSet<u16> = DOCS.iter().map(|doc| cluster.master_of(doc)).collect();
    assert!(masters.len() > 1, "the documents are spread over the masters");
    // Per document: readers inside, and whether a writer is.
    let inside: Arc<Mutex<std::collections::HashMap<String, (usize, bool)>>> = Arc::default();
    let (broken, shared) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let doc: fn(&(String, bool)) -> Option<String> = |(doc, _)| Some(doc.clone());
    let access: fn(&(String, bool)) -> Access =
        |(_, writes)| if *writes { Access::Write } else { Access::Read };
    let service = ReadWriteLayer::new(store.clone(), doc, access)
        .on_conflict(
            Retry::new(Backoff::exponential(
                Duration::from_millis(2),
                Duration::from_millis(20),
            ))
            .max_attempts(u32::MAX)
            .max_wait(Duration::from_secs(60)),
        )
        .layer(service_fn({
            let (inside, broken, shared) = (Arc::clone(&inside), Arc::clone(&broken), Arc::clone(&shared));
            move |(doc, writes): (String, bool)| {
                let (inside, broken, shared) =
                    (Arc::clone(&inside), Arc::clone(&broken), Arc::clone(&shared));
                async move {
                    {
                        let mut inside = inside.lock().unwrap();
                        let (readers, writer) = inside.entry(doc.clone()).or_default();
                        if *writer || (writes && *readers > 0) {
                            broken.fetch_add(1, Ordering::SeqCst);
                        }
                        if !writes && *readers > 0 {
                            shared.fetch_add(1, Ordering::SeqCst);
                        }
                        if writes { *writer = true } else { *readers += 1 }
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    let mut inside = inside.lock().unwrap();
                    let (readers, writer) = inside.entry(doc).or_default();
                    if writes {
                        *writer = false
                    } else {
                        *readers -= 1
                    }
                    Ok::<_, Infallible>(())
                }
            }
        }));
    let calls: Vec<_> = (0..80usize)
        .map(|n| {
            let request = (DOCS[n % 4].to_string(), n % 5 == 0);
            tokio::spawn(service.clone().oneshot(request))
        })
        .collect();
    let all = async {
        for call in calls {
            if let Err(error) = call.await.unwrap() {
                panic!("{error:?}");
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("every request ends");
    assert_eq!(broken.load(Ordering::SeqCst), 0, "a writer had company");
    assert!(shared.load(Ordering::SeqCst) > 0, "readers shared a document");
}

/// Keys closed by their handlers on every master: each is refused until its reopening with
/// the time to it, the others are admitted, the listing of every master shows them closed, and
/// an operator's reopening opens each where it lives.
async fn keys_closed_by_their_handlers_wait_on_a_cluster(kind: Server) {
    const DOMAINS: [&str; 4] = ["domain:1", "domain:2", "domain:3", "domain:4"];
    let cluster = RedisCluster::start_of(kind, 3, 0);
    let store = cluster_store(&cluster).await;
    let masters: HashSet<u16> = DOMAINS.iter().map(|domain| cluster.master_of(domain)).collect();
    assert!(masters.len() > 1, "the domains are spread over the masters");
    let closed = Duration::from_secs(5);
    let fetch = ThrottleLayer::new(
        store.clone(),
        |(domain, _): &(String, bool)| Some(domain.clone()),
        Rate::per_second(100).unwrap().burst(5).unwrap(),
    )
    .layer(service_fn(move |(_, limited): (String, bool)| async move {
        if limited {
            redefer::throttle::close_for(closed).await?;
        }
        Ok::<_, redefer::throttle::CloseError>(())
    }));
    // Every other domain hears 429.
    for (n, domain) in DOMAINS.iter().enumerate() {
        let outcome = fetch.clone().oneshot((domain.to_string(), n % 2 == 0)).await;
        assert!(outcome.is_ok(), "{domain}: {outcome:?}");
    }
    for (n, domain) in DOMAINS.iter().enumerate() {
        match fetch.clone().oneshot((domain.to_string(), false)).await {
            Err(redefer::Error::Throttled { retry_after, .. }) if n % 2 == 0 => {
                assert!(
                    retry_after > closed - Duration::from_secs(1),
                    "{domain}: {retry_after:?}"
                );
            }
            Ok(_) if n % 2 == 1 => {}
            other => panic!("{domain}: {other:?}"),
        }
    }
    let listed: HashSet<String> = store
        .cluster_locks(1_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|entry| entry.closed_for.is_some())
        .map(|entry| entry.key)
        .collect();
    assert_eq!(
        listed,
        HashSet::from(["domain:1".to_string(), "domain:3".to_string()])
    );
    // Reopened by an operator, on whichever master holds each: admitted again at once (a
    // burst of 5, one used before the closing).
    for domain in ["domain:1", "domain:3"] {
        let reopened = store.reopen(&LockKey::new(domain).unwrap()).await.unwrap();
        assert_eq!(reopened, Some(Duration::ZERO), "{domain}");
        let outcome = fetch.clone().oneshot((domain.to_string(), false)).await;
        assert!(outcome.is_ok(), "{domain}: {outcome:?}");
    }
}

for_each_server!(
    keys_closed_by_their_handlers_wait_on_a_cluster,
    readers_and_writers_work_on_a_cluster,
    groups_share_a_sharded_queue_on_a_cluster,
    sets_of_keys_on_several_slots_never_overlap_nor_deadlock_on_a_cluster,
    the_policies_for_what_waits_work_on_a_cluster,
    the_throttle_and_the_semaphore_work_on_a_cluster,
    the_locks_of_every_master_are_listed,
    the_lock_layer_and_a_deferral_work_on_a_cluster,
    the_shards_of_a_queue_land_on_different_masters,
    concurrent_claimers_on_a_sharded_cluster_queue_receive_each_job_once,
    a_scheduler_carries_on_through_a_master_failover,
    a_scheduler_carries_on_through_the_failover_of_a_master_gone_silent,
);
