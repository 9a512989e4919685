//! Conformance of what operators do to a queue, over every store: pause and resume, run now,
//! the status of a job after the fact (retention), listing page by page, per-minute activity.

use crate::support;

use crate::support::Shorthand;
use std::collections::HashSet;
use std::time::Duration;

use redefer::queue::{Counters, DelayQueue, JobId, JobSet, JobStatus, ListCursor, QueueStore, Retention};

use support::for_each_store;

const LEASE: Duration = Duration::from_secs(30);

async fn a_paused_queue_hands_out_nothing_until_resumed<St: QueueStore>(store: St) {
    let queue = DelayQueue::<u32, _>::new(store, "jobs")
        .unwrap()
        .shards(2)
        .unwrap();
    queue.push_many(&[1, 2, 3], Duration::ZERO).await.unwrap();
    let mut wakeups = queue.wakeups();
    assert!(!queue.operator().pause().await.unwrap(), "was not paused");
    assert!(queue.operator().stats().await.unwrap().paused);
    let claimed = queue.claim(10, LEASE).await.unwrap();
    assert!(
        claimed.jobs.is_empty(),
        "a paused queue's claim hands out nothing"
    );
    assert_eq!(
        queue.operator().stats().await.unwrap().due,
        3,
        "the jobs wait, due"
    );
    // Redis: each shard's subscription signals once when it is in place.
    while tokio::time::timeout(Duration::from_millis(300), wakeups.next())
        .await
        .is_ok()
    {}
    assert!(queue.operator().resume().await.unwrap(), "was paused");
    tokio::time::timeout(Duration::from_secs(5), wakeups.next())
        .await
        .expect("resuming wakes the schedulers");
    assert_eq!(queue.claim(10, LEASE).await.unwrap().jobs.len(), 3);
    assert!(!queue.operator().stats().await.unwrap().paused);
}

async fn run_now_makes_a_waiting_job_due<St: QueueStore>(store: St) {
    let queue = DelayQueue::<u32, _>::new(store, "jobs").unwrap();
    let later = queue.push(&1, Duration::from_secs(3600)).await.unwrap().id;
    assert!(queue.claim(10, LEASE).await.unwrap().jobs.is_empty());
    assert!(queue.operator().run_now(&later).await.unwrap());
    let job = queue.claim(10, LEASE).await.unwrap().jobs.remove(0);
    assert_eq!(job.envelope.id, later);
    assert!(
        !queue.operator().run_now(&later).await.unwrap(),
        "in flight: not waiting"
    );
    assert!(
        !queue
            .operator()
            .run_now(&JobId::new("no-such-job").unwrap())
            .await
            .unwrap()
    );
}

async fn a_finished_job_s_status_is_kept_within_the_retention<St: QueueStore>(store: St) {
    let queue = DelayQueue::<u32, _>::new(store.clone(), "jobs")
        .unwrap()
        .retain_finished(Retention::new(2, Duration::from_secs(3600)));
    let ids: Vec<_> = queue
        .push_many(&[1, 2, 3, 4], Duration::ZERO)
        .await
        .unwrap()
        .into_iter()
        .map(|scheduled| scheduled.id)
        .collect();
    assert!(matches!(
        queue.status(&ids[0]).await.unwrap(),
        JobStatus::Waiting {
            attempts: Some(0),
            ..
        }
    ));
    let mut jobs = queue.claim(4, LEASE).await.unwrap().jobs;
    jobs.sort_by_key(|job| job.envelope.payload);
    assert!(matches!(
        queue.status(&ids[0]).await.unwrap(),
        JobStatus::InFlight {
            attempts: Some(1),
            ..
        }
    ));
    for job in &jobs[..3] {
        assert!(queue.ack(&job.lease).await.unwrap());
    }
    assert!(queue.bury(&jobs[3].lease, "boom").await.unwrap());
    // Three finished; the count keeps two (acks within one ms tie: which one goes is the
    // first by id).
    let mut kept = Vec::new();
    for id in &ids[..3] {
        match queue.status(id).await.unwrap() {
            JobStatus::Done { attempts, .. } => {
                assert_eq!(attempts, Some(1));
                kept.push(id.clone());
            }
            JobStatus::Unknown => {}
            other => panic!("{id}: {other:?}"),
        }
    }
    assert_eq!(
        kept.len(),
        2,
        "the oldest finished job is forgotten beyond the count"
    );
    assert!(matches!(
        queue.status(&ids[3]).await.unwrap(),
        JobStatus::Dead { reason: Some(ref reason), .. } if reason == "boom"
    ));
    let stats = queue.operator().stats().await.unwrap();
    assert_eq!((stats.done, stats.dead, stats.waiting), (2, 1, 0));
    let done = queue.operator().list(JobSet::Done, 10).await.unwrap();
    let listed: HashSet<String> = done.iter().map(|entry| entry.id.clone()).collect();
    assert_eq!(listed, kept.iter().map(|id| id.to_string()).collect());
    assert!(
        done.iter().all(|entry| matches!(entry.envelope, Some(Ok(_)))),
        "with their envelopes"
    );

    // Without a retention an acked job is gone, and its id is free either way.
    let plain = DelayQueue::<u32, _>::new(store, "plain").unwrap();
    let id = plain.push(&5, Duration::ZERO).await.unwrap().id;
    let job = plain.claim(1, LEASE).await.unwrap().jobs.remove(0);
    assert!(plain.ack(&job.lease).await.unwrap());
    assert_eq!(plain.status(&id).await.unwrap(), JobStatus::Unknown);
    queue
        .push_with_id(
            kept[0].clone(),
            &9,
            redefer::queue::Due::In(Duration::from_secs(60)),
        )
        .await
        .expect("a kept job's id is free for a new job");
    assert!(matches!(
        queue.status(&kept[0]).await.unwrap(),
        JobStatus::Waiting { .. }
    ));
}

async fn finished_jobs_older_than_the_retention_are_forgotten<St: QueueStore>(store: St) {
    let queue = DelayQueue::<u32, _>::new(store, "jobs")
        .unwrap()
        .retain_finished(Retention::new(1_000, Duration::from_millis(50)));
    let old = queue.push(&1, Duration::ZERO).await.unwrap().id;
    let job = queue.claim(1, LEASE).await.unwrap().jobs.remove(0);
    queue.ack(&job.lease).await.unwrap();
    assert!(matches!(
        queue.status(&old).await.unwrap(),
        JobStatus::Done { .. }
    ));
    // Age is measured by the store's clock, at the next ack.
    tokio::time::sleep(Duration::from_millis(120)).await;
    queue.push(&2, Duration::ZERO).await.unwrap();
    let job = queue.claim(1, LEASE).await.unwrap().jobs.remove(0);
    queue.ack(&job.lease).await.unwrap();
    assert_eq!(queue.status(&old).await.unwrap(), JobStatus::Unknown);
    assert_eq!(queue.operator().stats().await.unwrap().done, 1);
}

async fn pages_by_cursor_list_every_entry_once_in_order<St: QueueStore>(store: St) {
    let queue = DelayQueue::<u32, _>::new(store, "jobs")
        .unwrap()
        .shards(3)
        .unwrap();
    // Ties: a bulk push gives its jobs one due time.
    let items: Vec<u32> = (0..25).collect();
    queue.push_many(&items, Duration::from_secs(60)).await.unwrap();
    queue
        .push_many(&items[..5], Duration::from_secs(120))
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut after: Option<ListCursor> = None;
    loop {
        let page = queue
            .operator()
            .list_after(JobSet::Waiting, after.as_ref(), 7)
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.cursor());
        seen.extend(page.iter().map(|entry| (entry.at, entry.id.clone())));
    }
    assert_eq!(seen.len(), 30);
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted, "time order, ties by id");
    assert_eq!(
        seen.iter().map(|(_, id)| id).collect::<HashSet<_>>().len(),
        30,
        "each once"
    );

    // A cursor whose entry left the set (claimed, cancelled) still starts after it.
    let first_page = queue
        .operator()
        .list_after(JobSet::Waiting, None, 10)
        .await
        .unwrap();
    let cursor = first_page[9].cursor();
    queue
        .cancel(&JobId::new(first_page[9].id.as_str()).unwrap())
        .await
        .unwrap();
    let next = queue
        .operator()
        .list_after(JobSet::Waiting, Some(&cursor), 100)
        .await
        .unwrap();
    assert_eq!(next.len(), 20);
    assert_eq!(next[0].id, seen[10].1);
}

async fn the_activity_counts_each_minute_s_claims_acks_failures_and_burials<St: QueueStore>(store: St) {
    let queue = DelayQueue::<u32, _>::new(store, "jobs").unwrap();
    assert!(queue.operator().activity().await.unwrap().is_empty());
    queue.push_many(&[1, 2, 3, 4], Duration::ZERO).await.unwrap();
    let jobs = queue.claim(4, LEASE).await.unwrap().jobs;
    queue.ack(&jobs[0].lease).await.unwrap();
    queue.ack(&jobs[1].lease).await.unwrap();
    queue.fail(&jobs[2].lease, "flaky").await.unwrap();
    queue.bury(&jobs[3].lease, "boom").await.unwrap();
    let minutes = queue.operator().activity().await.unwrap();
    let total = |f: fn(&redefer::queue::MinuteActivity) -> u64| minutes.iter().map(f).sum::<u64>();
    assert_eq!(total(|m| m.claimed), 4);
    assert_eq!(total(|m| m.done), 2);
    assert_eq!(total(|m| m.failed), 1);
    assert_eq!(total(|m| m.dead), 1);
    assert!(minutes.len() <= 2, "one minute, or two across a minute's end");
}

/// With the counters off, the same operations count nothing; a scheduler on such a handle
/// says so in the registry, and a producer's push (which counts nothing either way) does not
/// undo it.
async fn a_queue_with_its_counters_off_counts_nothing_and_its_scheduler_says_so<St: QueueStore>(store: St) {
    let queue = DelayQueue::<u32, _>::new(store.clone(), "jobs")
        .unwrap()
        .count_activity(Counters::Off);
    queue.push_many(&[1, 2, 3, 4], Duration::ZERO).await.unwrap();
    let jobs = queue.claim(4, LEASE).await.unwrap().jobs;
    queue.ack(&jobs[0].lease).await.unwrap();
    queue.ack_many(&[&jobs[1].lease]).await.unwrap();
    queue.fail(&jobs[2].lease, "flaky").await.unwrap();
    queue.bury(&jobs[3].lease, "boom").await.unwrap();
    assert_eq!(
        queue.operator().activity().await.unwrap(),
        Vec::new(),
        "nothing counted"
    );

    let counters_of = |store: St| async move {
        let registered = store.registered().await.unwrap();
        registered
            .iter()
            .find(|queue| queue.name == "jobs")
            .map(|queue| queue.counters)
    };
    assert_eq!(
        counters_of(store.clone()).await,
        Some(Counters::On),
        "no scheduler yet"
    );
    let handler = tower::service_fn(|_: u32| async {
        Ok::<_, redefer::Error<std::convert::Infallible>>(redefer::Outcome::Done(()))
    });
    let scheduler = redefer::Scheduler::new(queue.clone(), handler).start();
    support::eventually(Duration::from_secs(10), "the scheduler registers", || {
        let store = store.clone();
        async move { (counters_of(store).await == Some(Counters::Off)).then_some(()) }
    })
    .await;
    scheduler.shutdown().await;
    let producer = DelayQueue::<u32, _>::new(store.clone(), "jobs").unwrap();
    producer.push(&5, Duration::from_secs(60)).await.unwrap();
    assert_eq!(
        counters_of(store).await,
        Some(Counters::Off),
        "a push leaves it as it is"
    );
}

for_each_store!(
    a_queue_with_its_counters_off_counts_nothing_and_its_scheduler_says_so,
    a_paused_queue_hands_out_nothing_until_resumed,
    run_now_makes_a_waiting_job_due,
    a_finished_job_s_status_is_kept_within_the_retention,
    finished_jobs_older_than_the_retention_are_forgotten,
    pages_by_cursor_list_every_entry_once_in_order,
    the_activity_counts_each_minute_s_claims_acks_failures_and_burials,
);

/// The activity hash is for people: one another client broke (a field that is no number, a
/// key of the wrong type) costs its counts, never a claim or an ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_activity_hash_never_fails_a_job_operation() {
    let server = support::RedisServer::start();
    let store = server.store().await;
    let activity = format!("{}:q:{{jobs}}:activity", store.prefix().as_str());
    let queue = DelayQueue::<u32, _>::new(store, "jobs").unwrap();
    queue.push_many(&[1, 2], Duration::ZERO).await.unwrap();
    let now_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60;
    for minute in [now_minute, now_minute + 1] {
        let _: () = server
            .cmd(
                ::redis::cmd("HSET")
                    .arg(&activity)
                    .arg(format!("{minute}:claimed"))
                    .arg("not a number"),
            )
            .await;
    }
    let job = queue
        .claim(1, LEASE)
        .await
        .expect("a claim despite the broken hash")
        .jobs
        .remove(0);
    assert!(queue.ack(&job.lease).await.unwrap());
    let _: () = server.cmd(::redis::cmd("DEL").arg(&activity)).await;
    let _: () = server
        .cmd(::redis::cmd("SET").arg(&activity).arg("a string"))
        .await;
    let job = queue
        .claim(1, LEASE)
        .await
        .expect("a claim despite a key of the wrong type")
        .jobs
        .remove(0);
    assert!(queue.ack(&job.lease).await.unwrap());
    assert!(
        queue.operator().activity().await.is_err(),
        "reading it is the one thing that fails"
    );
}

/// The activity hash keeps the last hour: the first count of a new minute drops the minutes
/// out of the window, and the hash names the minute it last wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_minute_drops_the_minutes_out_of_the_window() {
    let server = support::RedisServer::start();
    let store = server.store().await;
    let activity = format!("{}:q:{{jobs}}:activity", store.prefix().as_str());
    let queue = DelayQueue::<u32, _>::new(store, "jobs").unwrap();
    queue.push(&1, Duration::ZERO).await.unwrap();
    let now_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60;
    let (old, recent) = (now_minute - 120, now_minute - 2);
    for (field, value) in [
        (format!("{old}:claimed"), "5".to_string()),
        (format!("{recent}:claimed"), "7".to_string()),
        ("minute".to_string(), recent.to_string()),
    ] {
        let _: () = server
            .cmd(::redis::cmd("HSET").arg(&activity).arg(field).arg(value))
            .await;
    }
    let job = queue.claim(1, LEASE).await.unwrap().jobs.remove(0);
    assert!(queue.ack(&job.lease).await.unwrap());
    let fields: std::collections::HashMap<String, String> =
        server.cmd(::redis::cmd("HGETALL").arg(&activity)).await;
    assert!(!fields.contains_key(&format!("{old}:claimed")), "{fields:?}");
    assert_eq!(
        fields.get(&format!("{recent}:claimed")).map(String::as_str),
        Some("7")
    );
    let minute: u64 = fields["minute"].parse().unwrap();
    assert!(minute >= now_minute, "{fields:?}");
}

/// A key whose reservation ran out unused keeps its line with no holder: the listing shows it
/// (`redefer locks`, the dashboard), with its waiters, for a mutex and for a semaphore.
async fn keys_with_waiters_and_no_holder_are_listed<St>(store: St)
where
    St: redefer::lock::LockStore + redefer::store::ListLocks,
{
    use redefer::guard::Waiter;
    use redefer::{LockKey, LockToken};

    let (mutex, semaphore) = (
        LockKey::new("order:line").unwrap(),
        LockKey::new("tenant:line").unwrap(),
    );
    let waiter = || Waiter::caller(LockToken::random());
    // The free key is reserved for its first waiter, who never comes.
    store.join(&mutex, &waiter(), None).await.unwrap();
    store.join_permits(&semaphore, &waiter(), None, 1).await.unwrap();
    let listed =
        |locks: &[redefer::store::LockInfo], key: &str| locks.iter().find(|info| info.key == key).cloned();
    let locks = support::eventually(Duration::from_secs(10), "the reservations ran out", || async {
        let locks = store.list_locks(100).await.unwrap();
        let unheld = |key| listed(&locks, key).is_some_and(|info| info.remaining.is_none());
        (unheld("order:line") && unheld("tenant:line")).then_some(locks)
    })
    .await;
    for key in ["order:line", "tenant:line"] {
        let info = listed(&locks, key).unwrap();
        assert_eq!(
            (info.waiters, info.holders, info.reserved_for),
            (1, 0, None),
            "{key}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_with_waiters_and_no_holder_are_listed_in_memory() {
    let store = redefer::MemoryStore::new().with_reservation(Duration::from_millis(50));
    keys_with_waiters_and_no_holder_are_listed(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_with_waiters_and_no_holder_are_listed_on_redis() {
    let server = support::TestRedis::start();
    let store = server.store().await.with_reservation(Duration::from_millis(50));
    keys_with_waiters_and_no_holder_are_listed(store).await;
}

/// Values no redefer process writes (another tool's keys under the prefix, a damaged value):
/// each key that holds one is listed with what could be read and says what could not, and
/// every other key is listed as it is. One such key failed the whole listing (`redefer
/// locks` and the dashboard's locks page) with a raw type error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_reads_around_values_it_cannot_read() {
    use redefer::store::ListLocks;

    let server = support::RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let key = |kind: &str, tag: &str| format!("{prefix}:{kind}:{{{tag}}}");
    let held = |tag: &str| {
        ::redis::cmd("SET")
            .arg(key("lock", tag))
            .arg("0123456789abcdef0123456789abcdef")
            .arg("PX")
            .arg(60_000)
            .clone()
    };
    let far = u64::MAX >> 12;
    let commands = [
        held("good"),
        ::redis::cmd("SET").arg(key("fence", "good")).arg(7).clone(),
        held("bad-fence"),
        ::redis::cmd("SET")
            .arg(key("fence", "bad-fence"))
            .arg("zzz")
            .clone(),
        held("bad-line"),
        ::redis::cmd("SET")
            .arg(key("waiters", "bad-line"))
            .arg("a string")
            .clone(),
        ::redis::cmd("ZADD")
            .arg(key("permits", "bad-limit"))
            .arg(far)
            .arg("holder")
            .clone(),
        ::redis::cmd("PEXPIRE")
            .arg(key("permits", "bad-limit"))
            .arg(60_000)
            .clone(),
        ::redis::cmd("HSET")
            .arg(key("permit-fences", "bad-limit"))
            .arg("holder")
            .arg(5)
            .clone(),
        ::redis::cmd("SET")
            .arg(key("permit-limit", "bad-limit"))
            .arg("abc")
            .clone(),
        ::redis::cmd("SET")
            .arg(key("throttle", "bad-schedule"))
            .arg("soon")
            .arg("PX")
            .arg(60_000)
            .clone(),
    ];
    for command in &commands {
        let _: ::redis::Value = server.cmd(command).await;
    }
    let locks = store
        .list_locks(100)
        .await
        .expect("a listing despite the values it cannot read");
    let listed = |name: &str| {
        locks
            .iter()
            .find(|info| info.key == name)
            .unwrap_or_else(|| panic!("{name} is listed: {locks:?}"))
    };
    let good = listed("good");
    assert_eq!(
        (good.fence, good.holders, &good.unreadable),
        (7, 1, &None::<String>)
    );
    let bad_fence = listed("bad-fence");
    assert_eq!((bad_fence.fence, bad_fence.holders), (0, 1), "{bad_fence:?}");
    for (name, part) in [
        ("bad-fence", "fencing counter"),
        ("bad-line", "line"),
        ("bad-limit", "limit"),
        ("bad-schedule", "schedule"),
    ] {
        let unreadable = listed(name).unreadable.clone().unwrap_or_default();
        assert!(unreadable.contains(part), "{name}: {unreadable:?}");
    }
    assert_eq!(listed("bad-limit").holders, 1);
    assert!(
        listed("bad-schedule").next_slot.is_some(),
        "listed as a throttled key"
    );
}

/// Names under the prefix that are not UTF-8 (no redefer process writes one: another tool's
/// keys, or damaged ones) are listed as far as they read, beside the others: the lock listing,
/// the footprint and the queue registry each failed on one of them, hiding every other key
/// (`redefer locks`, `footprint` and `queues` printed only "Cannot convert from UTF-8").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_are_not_utf8_are_listed_beside_the_others_not_a_failed_read() {
    use redefer::lock::Acquisition;
    use redefer::queue::QueueRegistry;
    use redefer::store::ListLocks;
    use redefer::{LockKey, LockToken};

    let server = support::RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<u32, _>::new(store.clone(), "orders").unwrap();
    queue.push(&1, Duration::from_secs(60)).await.unwrap();
    let held = LockKey::new("order:7").unwrap();
    let acquired = store
        .try_acquire(&held, LockToken::random(), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(matches!(acquired, Acquisition::Acquired(_)));
    let not_utf8 = |name: &str| [prefix.as_bytes(), name.as_bytes(), b"\xff}"].concat();
    let _: ::redis::Value = server
        .cmd(
            ::redis::cmd("SET")
                .arg(not_utf8(":lock:{bad"))
                .arg("a token")
                .arg("PX")
                .arg(60_000),
        )
        .await;
    let _: ::redis::Value = server
        .cmd(
            ::redis::cmd("SADD")
                .arg(format!("{prefix}:queues"))
                .arg(b"bad\xfe".as_slice()),
        )
        .await;
    let _: ::redis::Value = server
        .cmd(
            ::redis::cmd("HSET")
                .arg(format!("{prefix}:queue-shards"))
                .arg("orders")
                .arg(b"\xff".as_slice()),
        )
        .await;

    let locks = store.list_locks(100).await.expect("a listing despite the name");
    let names: Vec<&str> = locks.iter().map(|info| info.key.as_str()).collect();
    assert!(names.contains(&"order:7"), "{locks:?}");
    let bad = locks
        .iter()
        .find(|info| info.key == format!("{prefix}:lock:{{bad\u{FFFD}}}"))
        .unwrap_or_else(|| panic!("the key is listed under its name as far as it reads: {locks:?}"));
    assert!(
        bad.unreadable.as_deref().unwrap_or("").contains("not UTF-8"),
        "{bad:?}"
    );

    let footprint = store
        .footprint(10_000)
        .await
        .expect("a footprint despite the name");
    assert_eq!(
        footprint.kinds.get("lock").map(|kind| kind.keys),
        Some(2),
        "{footprint:?}"
    );

    let registered = store.registered().await.expect("the registry despite the member");
    let queues: Vec<(&str, usize)> = registered
        .iter()
        .map(|queue| (queue.name.as_str(), queue.shards))
        .collect();
    assert_eq!(queues, [("bad\u{FFFD}", 1), ("orders", 1)]);
}

/// A bury reason that is not UTF-8 (written over by another tool, or damaged) is shown as far as
/// it reads: `redefer list dead` and `redefer show` failed on it with "Cannot convert from
/// UTF-8", and the dead set could not be listed at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bury_reason_that_is_not_utf8_is_shown_as_far_as_it_reads() {
    let server = support::RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<u32, _>::new(store.clone(), "orders").unwrap();
    let id = queue.push(&1, Duration::from_secs(60)).await.unwrap().id;
    let key = |name: &str| format!("{prefix}:q:{{orders}}:{name}");
    let buried = [
        ::redis::cmd("ZREM").arg(key("delayed")).arg(id.as_str()).clone(),
        ::redis::cmd("ZADD")
            .arg(key("dead"))
            .arg(1)
            .arg(id.as_str())
            .clone(),
        ::redis::cmd("HSET")
            .arg(key("errors"))
            .arg(id.as_str())
            .arg(b"why\xff".as_slice())
            .clone(),
    ];
    for command in &buried {
        let _: ::redis::Value = server.cmd(command).await;
    }
    let dead = queue
        .operator()
        .list(JobSet::Dead, 10)
        .await
        .expect("the dead set listed");
    let reasons: Vec<Option<&str>> = dead.iter().map(|entry| entry.reason.as_deref()).collect();
    assert_eq!(reasons, [Some("why\u{FFFD}")]);
    let job = queue
        .operator()
        .job(&id)
        .await
        .expect("the job read")
        .expect("a job");
    assert!(
        matches!(job.state, redefer::queue::RawJobState::Dead { reason: Some(ref reason), .. } if reason == "why\u{FFFD}"),
        "{:?}",
        job.state
    );
}

/// A key of the queue or of the registry that holds another type than redefer keeps there
/// (another tool's key under the prefix) fails the operator's read with an error that says so,
/// not with the client's words for where it came from (a script's sha and line, a pipeline's
/// index), which is what `redefer stats` and `redefer queues` printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_named_as_such_not_by_the_script_that_read_it() {
    use redefer::queue::QueueRegistry;

    let server = support::RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<u32, _>::new(store.clone(), "orders").unwrap();
    queue.push(&1, Duration::ZERO).await.unwrap();
    let overwrite = |key: String| ::redis::cmd("SET").arg(key).arg("another tool's").clone();
    let _: ::redis::Value = server
        .cmd(&overwrite(format!("{prefix}:q:{{orders}}:dead")))
        .await;
    let _: ::redis::Value = server.cmd(&overwrite(format!("{prefix}:queue-shards"))).await;
    let stats = queue
        .operator()
        .stats()
        .await
        .expect_err("the dead set is a string");
    let registered = store
        .registered()
        .await
        .expect_err("the shard counts are a string");
    for error in [stats.to_string(), registered.to_string()] {
        assert!(
            error.contains("holds another type of value than redefer keeps there"),
            "{error}"
        );
        assert!(
            !error.contains("script") && !error.contains("Pipeline"),
            "{error}"
        );
    }
}
