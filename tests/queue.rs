//! Conformance of the delay queue over every store: push, claim, leases, settle, inspect.

/// Fair shares across groups (a module, so that it shares this test binary).
#[path = "queue/fair_shares.rs"]
mod fair_shares;
use crate::support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use redefer::Backoff;
use redefer::queue::{AfterFailure, ClaimedJob, DelayQueue, JobId, QueueError, RetryPolicy};
use redefer::queue::{Cancelled, Due, JobSet, QueueStats, QueueStore, RawJobState, RegisteredQueue};
use tokio::sync::Mutex;

use support::{eventually, for_each_store};

const LEASE: Duration = Duration::from_secs(30);

fn queue<St: QueueStore>(store: St) -> DelayQueue<String, St> {
    DelayQueue::new(store, "jobs").unwrap()
}

fn stats(waiting: u64, due: u64, in_flight: u64, dead: u64) -> QueueStats {
    QueueStats {
        waiting,
        due,
        in_flight,
        dead,
        ..QueueStats::default()
    }
}

/// The next job a claim of `q` returns, waiting up to five seconds for one (a lease to run
/// out, a retry to become due); `what` names what is waited for.
async fn next_claimed<St: QueueStore>(q: &DelayQueue<String, St>, what: &str) -> ClaimedJob<String> {
    eventually(Duration::from_secs(5), what, || {
        let q = q.clone();
        async move { q.claim(10, LEASE).await.unwrap().jobs.pop() }
    })
    .await
}

async fn a_pushed_job_is_claimed_once_and_acked<St: QueueStore>(store: St) {
    let q = queue(store);
    let scheduled = q.push(&"hello".to_string(), Duration::ZERO).await.unwrap();
    assert!(scheduled.due <= SystemTime::now() + Duration::from_secs(1));
    assert_eq!(q.operator().stats().await.unwrap(), stats(1, 1, 0, 0));

    let claimed = q.claim(10, LEASE).await.unwrap();
    assert_eq!(claimed.jobs.len(), 1);
    let job = &claimed.jobs[0];
    assert_eq!(job.envelope.id, scheduled.id);
    assert_eq!(job.envelope.payload, "hello");
    assert_eq!(job.envelope.attempt, 0);
    assert_eq!(q.operator().stats().await.unwrap(), stats(0, 0, 1, 0));
    assert!(q.claim(10, LEASE).await.unwrap().jobs.is_empty(), "claimed once");

    assert!(q.ack(&job.lease).await.unwrap());
    assert!(!q.ack(&job.lease).await.unwrap(), "acked once");
    assert_eq!(q.operator().stats().await.unwrap(), QueueStats::default());
    assert!(q.operator().job(&scheduled.id).await.unwrap().is_none());
}

async fn only_due_jobs_are_claimed_in_due_order<St: QueueStore>(store: St) {
    let q = queue(store);
    let now = SystemTime::now();
    q.push_at(&"second".into(), now - Duration::from_secs(5))
        .await
        .unwrap();
    q.push_at(&"first".into(), now - Duration::from_secs(10))
        .await
        .unwrap();
    q.push(&"later".into(), Duration::from_secs(60)).await.unwrap();
    assert_eq!(q.operator().stats().await.unwrap(), stats(3, 2, 0, 0));

    // A lease longer than the wait, so that the next event is the waiting job, not a lease.
    let claimed = q.claim(10, Duration::from_secs(120)).await.unwrap();
    let payloads: Vec<_> = claimed.jobs.iter().map(|j| j.envelope.payload.as_str()).collect();
    assert_eq!(payloads, ["first", "second"]);
    let next_in = claimed.next_in.expect("a job is still waiting");
    assert!(
        next_in > Duration::from_secs(50) && next_in <= Duration::from_secs(60),
        "{next_in:?}"
    );
}

async fn a_claim_takes_at_most_its_batch<St: QueueStore>(store: St) {
    let q = queue(store);
    for i in 0..5 {
        q.push(&i.to_string(), Duration::ZERO).await.unwrap();
    }
    let first = q.claim(3, LEASE).await.unwrap();
    assert_eq!(first.jobs.len(), 3);
    assert_eq!(first.next_in, Some(Duration::ZERO), "more are due now");
    assert_eq!(q.claim(3, LEASE).await.unwrap().jobs.len(), 2);
}

async fn a_duplicate_id_writes_nothing<St: QueueStore>(store: St) {
    let q = queue(store);
    let id = JobId::new("order-7").unwrap();
    q.push_with_id(id.clone(), &"original".into(), Due::In(Duration::ZERO))
        .await
        .unwrap();
    match q
        .push_with_id(id.clone(), &"copy".into(), Due::In(Duration::ZERO))
        .await
    {
        Err(QueueError::DuplicateId(dup)) => assert_eq!(dup, id),
        other => panic!("expected DuplicateId, got {other:?}"),
    }
    let claimed = q.claim(10, LEASE).await.unwrap();
    assert_eq!(claimed.jobs.len(), 1);
    assert_eq!(claimed.jobs[0].envelope.payload, "original");
}

async fn an_oversized_job_is_refused_and_writes_nothing<St: QueueStore>(store: St) {
    let q = queue(store).max_payload(1024);
    match q.push(&"x".repeat(2000), Duration::ZERO).await {
        Err(QueueError::TooLarge { size, max: 1024 }) => assert!(size > 2000),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(q.operator().stats().await.unwrap(), QueueStats::default());
    q.push(&"x".repeat(900), Duration::ZERO).await.unwrap();
}

async fn concurrent_claimers_receive_each_job_exactly_once<St: QueueStore>(store: St) {
    const JOBS: usize = 10_000;
    let q = queue(store);
    let mut pushed = HashSet::new();
    for i in 0..JOBS {
        pushed.insert(q.push(&i.to_string(), Duration::ZERO).await.unwrap().id);
    }
    let seen = Arc::new(Mutex::new(Vec::with_capacity(JOBS)));
    let claimers: Vec<_> = (0..8)
        .map(|_| {
            let (q, seen) = (q.clone(), seen.clone());
            tokio::spawn(async move {
                loop {
                    let claimed = q.claim(64, LEASE).await.unwrap();
                    if claimed.jobs.is_empty() {
                        return;
                    }
                    for job in claimed.jobs {
                        seen.lock().await.push(job.envelope.id.clone());
                        assert!(q.ack(&job.lease).await.unwrap(), "our lease is the job's");
                    }
                }
            })
        })
        .collect();
    for claimer in claimers {
        claimer.await.unwrap();
    }
    let seen = seen.lock().await;
    assert_eq!(seen.len(), JOBS, "every job delivered, none twice");
    assert_eq!(seen.iter().cloned().collect::<HashSet<_>>(), pushed);
    assert_eq!(
        q.operator().stats().await.unwrap(),
        QueueStats::default(),
        "nothing left behind"
    );
}

async fn a_job_whose_claimer_crashed_is_delivered_again_after_its_lease<St: QueueStore>(store: St) {
    let q = queue(store);
    let id = q.push(&"work".into(), Duration::ZERO).await.unwrap().id;
    let crashed = q
        .claim(10, Duration::from_millis(100))
        .await
        .unwrap()
        .jobs
        .remove(0);
    assert!(
        q.claim(10, LEASE).await.unwrap().jobs.is_empty(),
        "held while the lease runs"
    );

    let again = next_claimed(&q, "the job is claimable after its lease").await;
    assert_eq!(again.envelope.id, id);
    assert_eq!(again.envelope.attempt, 0, "a crash is not a failed attempt");
    assert!(
        !q.ack(&crashed.lease).await.unwrap(),
        "the crashed claimer's lease is void"
    );
    assert!(!q.extend_lease(&crashed.lease, LEASE).await.unwrap());
    assert_eq!(
        q.fail(&crashed.lease, "late").await.unwrap(),
        AfterFailure::LeaseLost
    );
    assert!(q.ack(&again.lease).await.unwrap());
}

async fn an_extended_lease_is_not_recovered<St: QueueStore>(store: St) {
    let q = queue(store);
    q.push(&"work".into(), Duration::ZERO).await.unwrap();
    let job = q
        .claim(10, Duration::from_millis(200))
        .await
        .unwrap()
        .jobs
        .remove(0);
    assert!(q.extend_lease(&job.lease, LEASE).await.unwrap());
    let claimed = q.claim(10, LEASE).await.unwrap();
    assert!(claimed.jobs.is_empty());
    assert!(
        claimed.next_in.unwrap() > Duration::from_secs(20),
        "the lease now runs 30 s"
    );
    assert!(q.ack(&job.lease).await.unwrap());
}

async fn failed_attempts_back_off_then_go_to_the_dead_letter_set<St: QueueStore>(store: St) {
    let policy = RetryPolicy {
        backoff: Backoff::exponential(Duration::from_millis(20), Duration::from_secs(1)),
        max_attempts: 3,
        ..RetryPolicy::default()
    };
    let q = queue(store).retry_policy(policy);
    let id = q.push(&"flaky".into(), Duration::ZERO).await.unwrap().id;
    let mut previous_due = SystemTime::UNIX_EPOCH;
    for attempt in 0..3u32 {
        let job = next_claimed(&q, "the next attempt becomes due").await;
        assert_eq!(job.envelope.attempt, attempt);
        let before = SystemTime::now();
        match q.fail(&job.lease, "boom").await.unwrap() {
            AfterFailure::Retrying { due, attempt: next } => {
                assert!(attempt < 2, "attempt {attempt} of 3 is the last");
                assert_eq!(next, attempt + 1);
                let backoff = policy.backoff.upper_bound(next);
                assert!(
                    due + Duration::from_millis(2) >= before + backoff,
                    "due after the backoff"
                );
                assert!(due > previous_due, "due times grow");
                previous_due = due;
                let envelope = q
                    .operator()
                    .job(&id)
                    .await
                    .unwrap()
                    .unwrap()
                    .envelope
                    .unwrap()
                    .unwrap();
                assert_eq!(
                    (envelope.attempt, envelope.last_error.as_deref()),
                    (next, Some("boom"))
                );
            }
            AfterFailure::Buried { reason } => {
                assert_eq!(attempt, 2);
                assert_eq!(reason, "boom after 3 attempts");
            }
            AfterFailure::LeaseLost => panic!("our lease ran out"),
        }
    }
    let info = q
        .operator()
        .job(&id)
        .await
        .unwrap()
        .expect("kept in the dead-letter set");
    match info.state {
        RawJobState::Dead { reason, .. } => assert_eq!(reason.as_deref(), Some("boom after 3 attempts")),
        other => panic!("expected dead, got {other:?}"),
    }
    assert_eq!(
        info.envelope.unwrap().unwrap().payload,
        "flaky",
        "the payload is kept"
    );
    assert_eq!(q.operator().stats().await.unwrap(), stats(0, 0, 0, 1));
}

async fn cancel_deletes_waiting_and_dead_jobs_but_not_running_ones<St: QueueStore>(store: St) {
    let q = queue(store);
    let waiting = q.push(&"a".into(), Duration::from_secs(60)).await.unwrap().id;
    assert_eq!(q.cancel(&waiting).await.unwrap(), Cancelled::Deleted);
    assert_eq!(q.cancel(&waiting).await.unwrap(), Cancelled::NotFound);

    let running = q.push(&"b".into(), Duration::ZERO).await.unwrap().id;
    let job = q.claim(10, LEASE).await.unwrap().jobs.remove(0);
    assert_eq!(q.cancel(&running).await.unwrap(), Cancelled::InFlight);
    assert!(q.bury(&job.lease, "operator said so").await.unwrap());
    assert_eq!(q.cancel(&running).await.unwrap(), Cancelled::Deleted);
    assert_eq!(q.operator().stats().await.unwrap(), QueueStats::default());
}

async fn a_released_job_is_due_at_once_with_its_attempt_unchanged<St: QueueStore>(store: St) {
    let q = queue(store);
    q.push(&"work".into(), Duration::ZERO).await.unwrap();
    let job = q.claim(10, LEASE).await.unwrap().jobs.remove(0);
    assert!(q.release(&job.lease).await.unwrap());
    assert!(!q.release(&job.lease).await.unwrap(), "released once");
    let again = q.claim(10, LEASE).await.unwrap().jobs.remove(0);
    assert_eq!(again.envelope.id, job.envelope.id);
    assert_eq!(again.envelope.attempt, 0);
}

async fn pushing_an_earlier_job_wakes_the_queue_s_watchers<St: QueueStore>(store: St) {
    let q = queue(store);
    q.push(&"late".into(), Duration::from_secs(60)).await.unwrap();
    let mut wakeups = q.wakeups();
    // Redis: the subscription signals once when it is in place; memory: nothing to wait for.
    let _ = tokio::time::timeout(Duration::from_secs(2), wakeups.next()).await;
    q.push(&"early".into(), Duration::from_millis(50)).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), wakeups.next())
        .await
        .expect("an earlier job wakes the watchers");
}

async fn hostile_queue_names_are_independent_queues<St: QueueStore>(store: St) {
    let long = "q".repeat(redefer::queue::MAX_QUEUE_NAME_LEN);
    let names = [
        "a",
        "{a}",
        "a}",
        "}a",
        "%7Ba%7D",
        "a\0b",
        "a\0c",
        "очередь",
        "🔒",
        "a:delayed",
        long.as_str(),
    ];
    for name in names {
        let q = DelayQueue::<String, _>::new(store.clone(), name).unwrap();
        q.push(&name.to_string(), Duration::ZERO).await.unwrap();
    }
    for name in names {
        let q = DelayQueue::<String, _>::new(store.clone(), name).unwrap();
        let claimed = q.claim(100, LEASE).await.unwrap();
        let payloads: Vec<_> = claimed
            .jobs
            .iter()
            .map(|job| job.envelope.payload.as_str())
            .collect();
        assert_eq!(payloads, [name], "queue {name:?} holds its own job only");
    }
    let too_long = "q".repeat(redefer::queue::MAX_QUEUE_NAME_LEN + 1);
    assert!(matches!(
        DelayQueue::<String, _>::new(store.clone(), too_long),
        Err(redefer::KeyError::TooLong { .. })
    ));
    assert!(matches!(
        DelayQueue::<String, _>::new(store, ""),
        Err(redefer::KeyError::Empty { .. })
    ));
}

async fn a_sharded_queue_serves_every_shard_and_behaves_as_one_queue<St: QueueStore>(store: St) {
    let q = queue(store).shards(4).unwrap();
    let mut pushed = HashSet::new();
    for n in 0..200 {
        pushed.insert(q.push(&n.to_string(), Duration::ZERO).await.unwrap().id);
    }
    assert_eq!(
        q.operator().stats().await.unwrap(),
        stats(200, 200, 0, 0),
        "stats add up the shards"
    );
    // With every shard holding due jobs, a claim of 4 takes one from each: none starves.
    let first = q.claim(4, LEASE).await.unwrap();
    assert_eq!(first.jobs.len(), 4);
    let shards_served: HashSet<_> = first.jobs.iter().map(|job| job.lease.shard().clone()).collect();
    assert_eq!(
        shards_served.len(),
        4,
        "one job from each shard: {shards_served:?}"
    );
    // A failed job stays on its shard: it is found there, and claimed again from there.
    let failed = &first.jobs[0];
    assert!(matches!(
        q.fail(&failed.lease, "again").await.unwrap(),
        redefer::queue::AfterFailure::Retrying { .. }
    ));
    assert!(q.operator().job(&failed.envelope.id).await.unwrap().is_some());
    for job in &first.jobs[1..] {
        q.ack(&job.lease).await.unwrap();
    }
    let mut seen = HashSet::new();
    seen.extend(first.jobs[1..].iter().map(|job| job.envelope.id.clone()));
    loop {
        let claimed = q.claim(16, LEASE).await.unwrap();
        if claimed.jobs.is_empty() && claimed.next_in.is_none() {
            break;
        }
        for job in claimed.jobs {
            assert!(q.ack(&job.lease).await.unwrap());
            assert!(seen.insert(job.envelope.id.clone()), "delivered twice");
        }
        if seen.len() < 200 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    assert_eq!(seen, pushed);
    assert_eq!(q.operator().stats().await.unwrap(), QueueStats::default());
}

async fn operators_can_list_requeue_and_purge<St: QueueStore>(store: St) {
    let q = queue(store).shards(2).unwrap();
    let later = q.push(&"later".into(), Duration::from_secs(60)).await.unwrap().id;
    for n in 0..3 {
        q.push(&format!("doomed {n}"), Duration::ZERO).await.unwrap();
    }
    let claimed = q.claim(10, LEASE).await.unwrap();
    assert_eq!(claimed.jobs.len(), 3);
    for job in &claimed.jobs {
        assert!(q.bury(&job.lease, "broken").await.unwrap());
    }
    let waiting = q.operator().list(JobSet::Waiting, 10).await.unwrap();
    assert_eq!(
        waiting.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        [later.as_str()]
    );
    let dead = q.operator().list(JobSet::Dead, 10).await.unwrap();
    assert_eq!(dead.len(), 3);
    assert!(dead.iter().all(|e| e.reason.as_deref() == Some("broken")));
    assert!(dead.iter().all(|e| {
        e.envelope
            .as_ref()
            .unwrap()
            .as_ref()
            .unwrap()
            .payload
            .starts_with("doomed")
    }));
    assert_eq!(
        q.operator().list(JobSet::Dead, 2).await.unwrap().len(),
        2,
        "the limit holds"
    );

    let one = JobId::new(dead[0].id.as_str()).unwrap();
    assert_eq!(q.operator().requeue(std::slice::from_ref(&one)).await.unwrap(), 1);
    assert_eq!(
        q.operator().requeue(std::slice::from_ref(&one)).await.unwrap(),
        0,
        "no longer dead"
    );
    assert_eq!(q.operator().stats().await.unwrap(), stats(2, 1, 0, 2));
    assert_eq!(
        q.claim(10, LEASE).await.unwrap().jobs[0].envelope.id,
        one,
        "requeued jobs are due at once"
    );
    assert_eq!(q.operator().requeue_dead().await.unwrap(), 2);
    assert_eq!(q.operator().stats().await.unwrap(), stats(3, 2, 1, 0));

    assert_eq!(q.operator().purge(JobSet::Waiting).await.unwrap(), 3);
    assert_eq!(q.operator().purge(JobSet::InFlight).await.unwrap(), 1);
    assert_eq!(q.operator().stats().await.unwrap(), QueueStats::default());
    assert!(
        q.operator().job(&later).await.unwrap().is_none(),
        "purged with its bytes"
    );
}

async fn a_batched_ack_deletes_only_the_jobs_whose_lease_is_still_ours<St: QueueStore>(store: St) {
    let q = queue(store).shards(2).unwrap();
    for n in 0..6 {
        q.push(&n.to_string(), Duration::ZERO).await.unwrap();
    }
    let stale = q
        .claim(1, Duration::from_millis(50))
        .await
        .unwrap()
        .jobs
        .remove(0);
    let live = q.claim(10, LEASE).await.unwrap().jobs;
    assert_eq!(live.len(), 5);
    // The short lease runs out and another claimer takes that job.
    let taken = next_claimed(&q, "the short lease runs out").await;
    let mut leases: Vec<&redefer::queue::Lease> = live.iter().map(|job| &job.lease).collect();
    leases.insert(2, &stale.lease);
    let acked = q.ack_many(&leases).await.unwrap();
    assert_eq!(
        acked,
        [true, true, false, true, true, true],
        "each answer in its lease's place"
    );
    assert_eq!(
        q.operator().stats().await.unwrap(),
        stats(0, 0, 1, 0),
        "the re-claimed job is untouched"
    );
    assert_eq!(q.ack_many(&[&taken.lease]).await.unwrap(), [true]);
    assert!(q.ack_many(&[]).await.unwrap().is_empty());
}

/// The jobs of the first claim that finds any: those of a lease that ran out.
async fn back_after_a_lease<St: QueueStore>(q: &DelayQueue<String, St>) -> Vec<ClaimedJob<String>> {
    eventually(Duration::from_secs(5), "the claim's lease runs out", || {
        let q = q.clone();
        async move { Some(q.claim(10, LEASE).await.unwrap().jobs).filter(|jobs| !jobs.is_empty()) }
    })
    .await
}

/// The ids of `jobs`, sorted.
fn sorted_ids<'a>(jobs: impl IntoIterator<Item = &'a ClaimedJob<String>>) -> Vec<JobId> {
    let mut ids: Vec<JobId> = jobs.into_iter().map(|job| job.envelope.id.clone()).collect();
    ids.sort();
    ids
}

/// A claim's jobs share one lease: it ends for the jobs it still holds, not for those acked,
/// retried or buried meanwhile.
async fn a_claim_s_lease_returns_only_the_jobs_it_still_holds<St: QueueStore>(store: St) {
    let q = queue(store);
    for n in 0..5 {
        q.push(&n.to_string(), Duration::ZERO).await.unwrap();
    }
    let mut batch = q.claim(10, Duration::from_millis(300)).await.unwrap().jobs;
    assert_eq!(batch.len(), 5);
    batch.sort_by_key(|job| job.envelope.payload.clone());
    let [acked, buried, retried, crashed_a, crashed_b] = batch.try_into().ok().unwrap();
    assert!(q.ack(&acked.lease).await.unwrap());
    assert!(q.bury(&buried.lease, "given up").await.unwrap());
    assert!(matches!(
        q.fail(&retried.lease, "later").await.unwrap(),
        AfterFailure::Retrying { .. }
    ));
    assert_eq!(q.operator().stats().await.unwrap(), stats(1, 0, 2, 1));

    // They come back together: one lease ended for both.
    let back = back_after_a_lease(&q).await;
    assert_eq!(
        sorted_ids(&back),
        sorted_ids([&crashed_a, &crashed_b]),
        "the two jobs the lease still held, and only them"
    );
    for settled in [&acked, &buried, &retried, &crashed_a] {
        assert!(
            !q.ack(&settled.lease).await.unwrap(),
            "{}",
            settled.envelope.payload
        );
    }
    assert_eq!(
        q.ack_many(&back.iter().map(|job| &job.lease).collect::<Vec<_>>())
            .await
            .unwrap(),
        [true, true]
    );
    assert_eq!(
        q.operator().stats().await.unwrap(),
        stats(1, 0, 0, 1),
        "only the retried job, waiting, and the buried one"
    );
}

/// A lease that ran out comes back whole: a claim of one job after it finds the lease's two
/// jobs waiting again (one claimed, the other due), none left in flight under a lease that
/// ended (the memory store once sent back only as many jobs as the claim asked for).
async fn a_lease_that_ran_out_comes_back_whole<St: QueueStore>(store: St) {
    let q = queue(store);
    for n in 0..2 {
        q.push(&n.to_string(), Duration::ZERO).await.unwrap();
    }
    assert_eq!(
        q.claim(10, Duration::from_millis(100)).await.unwrap().jobs.len(),
        2
    );
    let back = eventually(Duration::from_secs(5), "the claim's lease runs out", || {
        let q = q.clone();
        async move { Some(q.claim(1, LEASE).await.unwrap().jobs).filter(|jobs| !jobs.is_empty()) }
    })
    .await;
    assert_eq!(back.len(), 1, "a claim of one");
    assert_eq!(
        q.operator().stats().await.unwrap(),
        stats(1, 1, 1, 0),
        "the lease's other job waits, due; only the claimed one is in flight"
    );
}

/// Extending one job's lease extends its claim's: the claim's other jobs keep their claimer
/// as long, and when it stops extending they come back together.
async fn extending_a_job_s_lease_extends_its_claim<St: QueueStore>(store: St) {
    let q = queue(store);
    for n in 0..3 {
        q.push(&n.to_string(), Duration::ZERO).await.unwrap();
    }
    let mut batch = q.claim(10, Duration::from_millis(300)).await.unwrap().jobs;
    batch.sort_by_key(|job| job.envelope.payload.clone());
    let [acked, extended, beside] = batch.try_into().ok().unwrap();
    assert!(q.ack(&acked.lease).await.unwrap());
    assert!(q.extend_lease(&extended.lease, LEASE).await.unwrap());
    assert!(
        !q.extend_lease(&acked.lease, LEASE).await.unwrap(),
        "an acked job's hold extends nothing"
    );
    let claimed = q.claim(10, LEASE).await.unwrap();
    assert!(claimed.jobs.is_empty(), "both held");
    assert!(
        claimed.next_in.unwrap() > Duration::from_secs(20),
        "the claim's lease now runs 30 s"
    );
    let until = |job: &ClaimedJob<String>| {
        let q = q.clone();
        let id = job.envelope.id.clone();
        async move {
            match q.operator().job(&id).await.unwrap().unwrap().state {
                RawJobState::InFlight { lease_until } => lease_until,
                other => panic!("{id} is in flight: {other:?}"),
            }
        }
    };
    assert_eq!(until(&beside).await, until(&extended).await, "one deadline");

    // The claimer extends once more, for a short while, and then stops: both come back.
    assert!(
        q.extend_lease(&beside.lease, Duration::from_millis(100))
            .await
            .unwrap()
    );
    let back = back_after_a_lease(&q).await;
    assert_eq!(sorted_ids(&back), sorted_ids([&extended, &beside]));
    assert!(
        !q.extend_lease(&extended.lease, LEASE).await.unwrap(),
        "the lease ended"
    );
}

/// An ack that names a job twice counts it once: the claim's lease still holds the rest.
async fn an_ack_naming_a_job_twice_leaves_the_rest_of_its_claim_held<St: QueueStore>(store: St) {
    let q = queue(store);
    for n in 0..2 {
        q.push(&n.to_string(), Duration::ZERO).await.unwrap();
    }
    let batch = q.claim(10, Duration::from_millis(300)).await.unwrap().jobs;
    let acked = q.ack_many(&[&batch[0].lease, &batch[0].lease]).await.unwrap();
    assert!(acked[0]);
    assert_eq!(q.operator().stats().await.unwrap(), stats(0, 0, 1, 0));
    let again = next_claimed(&q, "the other job returns after its lease").await;
    assert_eq!(again.envelope.id, batch[1].envelope.id);
    assert!(q.ack(&again.lease).await.unwrap());
    assert_eq!(q.operator().stats().await.unwrap(), QueueStats::default());
}

/// In-flight jobs are listed by lease deadline, ties by id, every one once, whichever claim's
/// lease holds them, with the deadline their inspection shows.
async fn in_flight_jobs_are_listed_by_deadline_across_claims<St: QueueStore>(store: St) {
    let q = queue(store);
    for n in 0..12 {
        q.push(&n.to_string(), Duration::ZERO).await.unwrap();
    }
    let mut claimed = Vec::new();
    for batch in [5, 4, 3] {
        claimed.extend(q.claim(batch, LEASE).await.unwrap().jobs);
    }
    assert_eq!(claimed.len(), 12);
    assert!(
        q.extend_lease(&claimed[6].lease, Duration::from_secs(10))
            .await
            .unwrap()
    );
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = q
            .operator()
            .list_after(JobSet::InFlight, after.as_ref(), 5)
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.cursor());
        seen.extend(page.iter().map(|entry| (entry.at, entry.id.clone())));
    }
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted, "deadline order, ties by id");
    assert_eq!(seen.len(), 12, "each once: {seen:?}");
    // The claim of claimed[6] (the second, 4 jobs) now ends first: its jobs are listed first.
    let mut extended: Vec<&str> = claimed[5..9].iter().map(|job| job.envelope.id.as_str()).collect();
    extended.sort();
    let first: Vec<&str> = seen[..4].iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(first, extended, "the shorter lease first");
    for (at, id) in &seen {
        let info = q
            .operator()
            .job(&JobId::new(id.as_str()).unwrap())
            .await
            .unwrap()
            .unwrap();
        let RawJobState::InFlight { lease_until } = info.state else {
            panic!("{id} is in flight: {:?}", info.state)
        };
        let listed = at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis();
        let inspected = lease_until
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        assert_eq!(listed, inspected, "{id}");
    }
    assert_eq!(q.operator().purge(JobSet::InFlight).await.unwrap(), 12);
    assert_eq!(q.operator().stats().await.unwrap(), QueueStats::default());
    assert!(!q.ack(&claimed[0].lease).await.unwrap(), "purged");
}

/// A claim's reply names the claim by its first job's fencing token; with the claim's lease
/// token, each job's hold acks it through the store's own API.
async fn a_claim_is_named_by_its_first_job_s_fence<St: QueueStore>(store: St) {
    use redefer::LockToken;
    use redefer::queue::{ClaimLimits, Counters, Hold, QueueName};

    let name = QueueName::new("named").unwrap();
    let limits = ClaimLimits {
        max_envelope: 1 << 20,
        max_expiries: 0,
    };
    let jobs: Vec<_> = (0..3)
        .map(|n| (JobId::new(format!("job-{n}")).unwrap(), b"{}".to_vec()))
        .collect();
    store
        .push_many(&name, &jobs, Due::In(Duration::ZERO))
        .await
        .unwrap();
    let token = LockToken::random();
    let batch = store
        .claim(&name, 3, LEASE, token, limits, Counters::Off)
        .await
        .unwrap();
    assert_eq!(batch.jobs.len(), 3);
    let first = batch.jobs[0].fence;
    assert!(batch.jobs.iter().all(|job| job.claim == first), "{batch:?}");
    assert!(batch.jobs.windows(2).all(|pair| pair[0].fence < pair[1].fence));
    let holds: Vec<_> = batch
        .jobs
        .iter()
        .map(|job| (&job.id, Hold::of(token, job)))
        .collect();
    assert_eq!(
        store.ack(&name, &holds, None, Counters::Off).await.unwrap(),
        [true; 3]
    );
}

/// A claimer may use one lease token for several claims (the store's API allows it): each
/// claim keeps its own lease, and every job it took comes back when that lease runs out.
async fn claims_under_one_token_keep_a_lease_each<St: QueueStore>(store: St) {
    use redefer::LockToken;
    use redefer::queue::{ClaimLimits, Counters, QueueName};

    let name = QueueName::new("one-token").unwrap();
    let limits = ClaimLimits {
        max_envelope: 1 << 20,
        max_expiries: 0,
    };
    for n in 0..3 {
        let id = JobId::new(format!("job-{n}")).unwrap();
        store
            .push_many(&name, &[(id, b"{}".to_vec())], Due::In(Duration::ZERO))
            .await
            .unwrap();
    }
    let token = LockToken::random();
    let short = Duration::from_millis(200);
    let mut fences = Vec::new();
    for _ in 0..3 {
        let batch = store
            .claim(&name, 1, short, token, limits, Counters::Off)
            .await
            .unwrap();
        assert_eq!(batch.jobs.len(), 1);
        fences.push(batch.jobs[0].fence);
    }
    assert!(fences.windows(2).all(|pair| pair[0] < pair[1]), "{fences:?}");
    let back = Arc::new(Mutex::new(HashSet::new()));
    eventually(Duration::from_secs(5), "every lease runs out", || {
        let (store, name, back) = (store.clone(), name.clone(), Arc::clone(&back));
        async move {
            let batch = store
                .claim(&name, 10, LEASE, LockToken::random(), limits, Counters::Off)
                .await
                .unwrap();
            let mut back = back.lock().await;
            back.extend(batch.jobs.into_iter().map(|job| job.id));
            (back.len() == 3).then_some(())
        }
    })
    .await;
}

/// A claim says when the next job is due or the next lease runs out, its own included: a
/// scheduler sleeps until then.
async fn a_claim_s_next_in_counts_the_lease_it_just_took<St: QueueStore>(store: St) {
    let q = queue(store);
    q.push(&"later".to_string(), Duration::from_secs(60))
        .await
        .unwrap();
    for batch in [1, 2] {
        for n in 0..batch {
            q.push(&format!("{batch}-{n}"), Duration::ZERO).await.unwrap();
        }
        let claimed = q.claim(batch, Duration::from_secs(10)).await.unwrap();
        assert_eq!(claimed.jobs.len(), batch);
        let next_in = claimed.next_in.expect("a lease runs out");
        assert!(
            next_in > Duration::from_secs(9) && next_in <= Duration::from_millis(10_001),
            "{next_in:?}"
        );
    }
}

async fn a_job_whose_lease_keeps_running_out_is_buried<St: QueueStore>(store: St) {
    let q = queue(store).retry_policy(RetryPolicy {
        max_lease_expiries: 3,
        ..RetryPolicy::default()
    });
    let id = q.push(&"poison".into(), Duration::ZERO).await.unwrap().id;
    // Three claimers in turn take it and die with it (no ack): each lease runs out.
    for delivery in 0..3 {
        let job = eventually(Duration::from_secs(5), "the job is claimable again", || {
            let q = q.clone();
            async move { q.claim(10, Duration::from_millis(30)).await.unwrap().jobs.pop() }
        })
        .await;
        assert_eq!(job.envelope.id, id, "delivery {delivery}");
        assert_eq!(
            job.envelope.attempt, 0,
            "a lease running out is not a failed attempt"
        );
    }
    // The third expiry buries it instead of handing it out a fourth time.
    eventually(Duration::from_secs(5), "the job is buried", || async {
        assert!(
            q.claim(10, Duration::from_millis(30))
                .await
                .unwrap()
                .jobs
                .is_empty(),
            "not delivered again"
        );
        (q.operator().stats().await.unwrap() == stats(0, 0, 0, 1)).then_some(())
    })
    .await;
    match q.operator().job(&id).await.unwrap().unwrap().state {
        RawJobState::Dead { reason, .. } => {
            assert_eq!(
                reason.as_deref(),
                Some("its lease ran out 3 times: the handler crashed or hung")
            )
        }
        other => panic!("expected dead, got {other:?}"),
    }
    // Requeued, it gets a fresh count.
    assert_eq!(q.operator().requeue(std::slice::from_ref(&id)).await.unwrap(), 1);
    let again = q.claim(10, LEASE).await.unwrap().jobs.remove(0);
    assert!(q.ack(&again.lease).await.unwrap());
}

/// Every way a claim finds an entry that cannot be handed out, on every store: each is buried
/// alone with the same reason, word for word, and the good job beside them is claimed.
async fn entries_that_cannot_be_jobs_are_buried_with_their_reasons<St: QueueStore>(store: St) {
    let name = redefer::queue::QueueName::new("jobs").unwrap();
    let q = queue(store.clone()).max_payload(200);
    let roomy = queue(store.clone()).max_payload(1024);
    let good = q.push(&"good".into(), Duration::ZERO).await.unwrap().id;
    let big = roomy.push(&"x".repeat(400), Duration::ZERO).await.unwrap().id;
    let empty = JobId::new("empty").unwrap();
    store
        .push_many(&name, &[(empty.clone(), Vec::new())], Due::In(Duration::ZERO))
        .await
        .unwrap();
    let garbage = JobId::new("garbage").unwrap();
    store
        .push_many(
            &name,
            &[(garbage.clone(), b"\xff not json".to_vec())],
            Due::In(Duration::ZERO),
        )
        .await
        .unwrap();

    let claimed = q.claim(10, LEASE).await.unwrap();
    assert_eq!(
        claimed
            .jobs
            .iter()
            .map(|job| &job.envelope.id)
            .collect::<Vec<_>>(),
        [&good]
    );
    assert_eq!(q.operator().stats().await.unwrap(), stats(0, 0, 1, 3));
    let reason = |id: JobId| {
        let q = q.clone();
        async move {
            match q.operator().job(&id).await.unwrap().unwrap().state {
                RawJobState::Dead { reason, .. } => reason.unwrap_or_default(),
                other => panic!("{id} should be dead, is {other:?}"),
            }
        }
    };
    let big_bytes = store.inspect(&name, &big).await.unwrap().envelope.unwrap().len();
    assert_eq!(
        reason(big).await,
        format!("the envelope is {big_bytes} bytes, over the limit of 200")
    );
    assert_eq!(
        reason(empty).await,
        "the job has no envelope (deleted or never written by redefer)"
    );
    assert!(reason(garbage).await.starts_with("cannot decode the envelope"));
}

/// A bulk push stores every item once, over several pages; an id already taken, or twice in one
/// batch, is stored once.
async fn a_bulk_push_stores_each_job_once<St: QueueStore>(store: St) {
    let q = DelayQueue::<u64, _>::new(store.clone(), "bulk").unwrap();
    let items: Vec<u64> = (0..2500).collect();
    let scheduled = q.push_many(&items, Duration::ZERO).await.unwrap();
    assert_eq!(scheduled.len(), 2500);
    assert_eq!(
        scheduled.iter().map(|s| &s.id).collect::<HashSet<_>>().len(),
        2500,
        "one id each"
    );
    assert_eq!(q.operator().stats().await.unwrap(), stats(2500, 2500, 0, 0));
    let mut seen = HashSet::new();
    loop {
        let claimed = q.claim(1000, LEASE).await.unwrap();
        if claimed.jobs.is_empty() {
            break;
        }
        for job in &claimed.jobs {
            assert!(
                seen.insert(job.envelope.payload),
                "{} twice",
                job.envelope.payload
            );
        }
        let leases: Vec<_> = claimed.jobs.iter().map(|job| &job.lease).collect();
        assert!(q.ack_many(&leases).await.unwrap().into_iter().all(|acked| acked));
    }
    assert_eq!(seen, items.into_iter().collect::<HashSet<_>>());

    let name = redefer::queue::QueueName::new("bulk").unwrap();
    let taken = JobId::new("taken").unwrap();
    store
        .push_many(&name, &[(taken.clone(), b"x".to_vec())], Due::In(LEASE))
        .await
        .unwrap();
    let twice = JobId::new("twice").unwrap();
    let batch = [
        (taken.clone(), b"y".to_vec()),
        (twice.clone(), b"first".to_vec()),
        (twice.clone(), b"second".to_vec()),
    ];
    let (_, stored) = store.push_many(&name, &batch, Due::In(LEASE)).await.unwrap();
    assert_eq!(stored, [false, true, false]);
    assert_eq!(
        store.inspect(&name, &taken).await.unwrap().envelope.as_deref(),
        Some(&b"x"[..])
    );
    assert_eq!(
        store.inspect(&name, &twice).await.unwrap().envelope.as_deref(),
        Some(&b"first"[..])
    );
}

async fn a_queue_registers_itself_on_its_first_push<S: QueueStore>(store: S) {
    let orders = DelayQueue::<u32, _>::new(store.clone(), "orders").unwrap();
    let refunds = DelayQueue::<u32, _>::new(store.clone(), "refunds")
        .unwrap()
        .shards(3)
        .unwrap();
    assert!(store.registered().await.unwrap().is_empty(), "nothing pushed yet");
    orders.push(&1, Duration::from_secs(60)).await.unwrap();
    orders.clone().push(&2, Duration::from_secs(60)).await.unwrap();
    refunds.push_many(&[3], Duration::from_secs(60)).await.unwrap();
    let registered = |name: &str, shards| RegisteredQueue {
        name: name.to_string(),
        shards,
        counters: redefer::queue::Counters::On,
    };
    assert_eq!(
        store.registered().await.unwrap(),
        [registered("orders", 1), registered("refunds", 3)],
        "each with its shard count"
    );
}

for_each_store!(
    a_lease_that_ran_out_comes_back_whole,
    a_queue_registers_itself_on_its_first_push,
    a_bulk_push_stores_each_job_once,
    entries_that_cannot_be_jobs_are_buried_with_their_reasons,
    a_pushed_job_is_claimed_once_and_acked,
    only_due_jobs_are_claimed_in_due_order,
    a_claim_takes_at_most_its_batch,
    a_duplicate_id_writes_nothing,
    an_oversized_job_is_refused_and_writes_nothing,
    concurrent_claimers_receive_each_job_exactly_once,
    a_job_whose_claimer_crashed_is_delivered_again_after_its_lease,
    an_extended_lease_is_not_recovered,
    failed_attempts_back_off_then_go_to_the_dead_letter_set,
    cancel_deletes_waiting_and_dead_jobs_but_not_running_ones,
    a_released_job_is_due_at_once_with_its_attempt_unchanged,
    pushing_an_earlier_job_wakes_the_queue_s_watchers,
    hostile_queue_names_are_independent_queues,
    a_sharded_queue_serves_every_shard_and_behaves_as_one_queue,
    operators_can_list_requeue_and_purge,
    a_batched_ack_deletes_only_the_jobs_whose_lease_is_still_ours,
    a_claim_s_lease_returns_only_the_jobs_it_still_holds,
    extending_a_job_s_lease_extends_its_claim,
    an_ack_naming_a_job_twice_leaves_the_rest_of_its_claim_held,
    in_flight_jobs_are_listed_by_deadline_across_claims,
    claims_under_one_token_keep_a_lease_each,
    a_claim_is_named_by_its_first_job_s_fence,
    a_claim_s_next_in_counts_the_lease_it_just_took,
    a_job_whose_lease_keeps_running_out_is_buried,
);
