//! Fair shares across groups, on every store: a small group is not behind a large group's
//! backlog, weights share the claims, a group alone takes them all, a job handed its key runs
//! ahead of every group's turn, and every guarantee of the queue holds for grouped jobs.

use crate::support::Shorthand;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redefer::lock::LockStore;
use redefer::queue::{DelayQueue, GroupWaiting, JobGroup, JobSet, QueueStats, QueueStore, RawJobState};
use redefer::strategy::{Coalesce, Defer};
use redefer::{LockKey, LockLayer, LockToken, Outcome, Scheduler, SchedulerOptions};
use serde::{Deserialize, Serialize};
use tower::{Layer, ServiceExt, service_fn};

use super::{LEASE, next_claimed, queue, stats};
use crate::support::{eventually, for_each_store};

fn group(name: &str) -> JobGroup {
    JobGroup::new(name).unwrap()
}

/// The payloads `q` hands out in claims of `batch` until `total` are claimed (acked at once).
async fn drain<St: QueueStore>(q: &DelayQueue<String, St>, batch: usize, total: usize) -> Vec<String> {
    let mut order = Vec::new();
    while order.len() < total {
        let claimed = q.claim(batch, LEASE).await.unwrap();
        assert!(
            !claimed.jobs.is_empty(),
            "ran dry after {} of {total}",
            order.len()
        );
        for job in claimed.jobs {
            assert!(q.ack(&job.lease).await.unwrap());
            order.push(job.envelope.payload);
        }
    }
    order
}

fn payloads(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|n| format!("{prefix}{n}")).collect()
}

/// Tenant A's backlog of 2,000 due jobs does not hold tenant B's three back: they come in the
/// first turns. In due order (no groups) they would come after all of A's.
async fn a_small_group_is_not_behind_a_large_groups_backlog<St: QueueStore>(store: St) {
    let q = queue(store);
    q.in_group(group("a"))
        .push_many(&payloads("a", 2_000), Duration::ZERO)
        .await
        .unwrap();
    q.in_group(group("b"))
        .push_many(&payloads("b", 3), Duration::ZERO)
        .await
        .unwrap();
    let first = drain(&q, 6, 6).await;
    let of_b = first.iter().filter(|payload| payload.starts_with('b')).count();
    assert_eq!(of_b, 3, "B's jobs in the first six claimed: {first:?}");
    // Within a group, jobs keep their push order.
    let of_a: Vec<&String> = first.iter().filter(|payload| payload.starts_with('a')).collect();
    assert_eq!(of_a, ["a0", "a1", "a2"]);
    assert_eq!(q.operator().stats().await.unwrap(), stats(1_997, 1_997, 0, 0));
}

/// Two saturated groups of weights 3 and 1 share the claims 3:1; ungrouped jobs pushed into a
/// queue with groups take the turns of one more group.
async fn weighted_groups_share_the_claims_in_proportion<St: QueueStore>(store: St) {
    let q = queue(store);
    q.in_group(group("heavy").weight(3).unwrap())
        .push_many(&payloads("h", 400), Duration::ZERO)
        .await
        .unwrap();
    q.in_group(group("light"))
        .push_many(&payloads("l", 400), Duration::ZERO)
        .await
        .unwrap();
    let first = drain(&q, 20, 200).await;
    let heavy = first.iter().filter(|payload| payload.starts_with('h')).count();
    assert!(
        heavy.abs_diff(150) <= 2,
        "{heavy} of 200 claims went to the heavy group"
    );
}

/// A group alone takes every claim, in push order: fairness never leaves a claim short.
async fn a_group_alone_takes_every_claim_in_push_order<St: QueueStore>(store: St) {
    let q = queue(store);
    let pushed = payloads("a", 50);
    let grouped = q.in_group(group("a"));
    grouped.push_many(&pushed[..25], Duration::ZERO).await.unwrap();
    for payload in &pushed[25..] {
        grouped.push(payload, Duration::ZERO).await.unwrap();
    }
    let claimed = q.claim(50, LEASE).await.unwrap();
    let order: Vec<String> = claimed
        .jobs
        .iter()
        .map(|job| job.envelope.payload.clone())
        .collect();
    assert_eq!(order, pushed);
    assert!(q.claim(50, LEASE).await.unwrap().jobs.is_empty());
}

/// Grouped jobs keep the queue's guarantees: a delayed one waits for its time, then takes its
/// group's turn; a job whose claimer died comes back; retries, burials, cancels, listings and
/// counts see ready jobs as waiting jobs; the groups are listed largest first.
async fn grouped_jobs_keep_every_guarantee_of_the_queue<St: QueueStore>(store: St) {
    let q = queue(store);
    let a = q.in_group(group("a"));
    let b = q.in_group(group("b"));
    a.push_many(&payloads("a", 3), Duration::ZERO).await.unwrap();
    let later = b
        .push(&"b-later".to_string(), Duration::from_millis(300))
        .await
        .unwrap();
    let cancelled = b.push(&"b-cancelled".to_string(), Duration::ZERO).await.unwrap();
    assert_eq!(q.operator().stats().await.unwrap(), stats(5, 4, 0, 0));
    let groups = q.operator().groups(10).await.unwrap();
    assert_eq!(groups.groups, 2);
    // The backlogs: the due jobs waiting for their group's turn (B's later job is not due).
    assert_eq!(
        groups.largest,
        [GroupWaiting::new("a", 3), GroupWaiting::new("b", 1)]
    );

    // Ready jobs are waiting jobs to every operator's reading and change: listed by due time
    // with the others; pages of two list each once.
    let waiting = q.operator().list(JobSet::Waiting, 10).await.unwrap();
    let listed: Vec<String> = waiting.iter().map(|entry| entry.id.clone()).collect();
    assert_eq!(listed.len(), 5, "{waiting:?}");
    assert_eq!(listed.last(), Some(&later.id.to_string()));
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = q
            .operator()
            .list_after(JobSet::Waiting, after.as_ref(), 2)
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some(redefer::queue::ListCursor {
            at: last.at,
            id: last.id.clone(),
        });
        paged.extend(page.iter().map(|entry| entry.id.clone()));
    }
    assert_eq!(paged, listed);
    let job = q.operator().job(&cancelled.id).await.unwrap().unwrap();
    assert!(
        matches!(job.state, RawJobState::Delayed { .. }),
        "{:?}",
        job.state
    );
    assert_eq!(
        q.cancel(&cancelled.id).await.unwrap(),
        redefer::queue::Cancelled::Deleted
    );
    assert_eq!(q.operator().stats().await.unwrap(), stats(4, 3, 0, 0));

    // A claimer that dies: its jobs come back after its lease, in their group's turn.
    let short = q.claim(3, Duration::from_millis(100)).await.unwrap();
    let order = |jobs: &[redefer::queue::ClaimedJob<String>]| -> Vec<String> {
        jobs.iter().map(|job| job.envelope.payload.clone()).collect()
    };
    assert_eq!(order(&short.jobs), ["a0", "a1", "a2"]);
    // Nothing is due now: no group has a backlog (B's later job is not due yet).
    assert_eq!(q.operator().groups(10).await.unwrap().groups, 0);
    let again = eventually(Duration::from_secs(5), "the jobs back after their lease", || {
        let q = q.clone();
        async move { Some(q.claim(10, LEASE).await.unwrap().jobs).filter(|jobs| !jobs.is_empty()) }
    })
    .await;
    // Back together, due at their lease's end: in id order among themselves, as any jobs due
    // at one time.
    let mut back = order(&again);
    back.sort();
    assert_eq!(back, ["a0", "a1", "a2"]);
    let again: Vec<_> = ["a0", "a1", "a2"]
        .iter()
        .map(|payload| again.iter().find(|job| job.envelope.payload == *payload).unwrap())
        .collect();
    // A failed attempt waits its backoff, then comes back; a burial goes to the dead set.
    assert!(matches!(
        q.fail(&again[0].lease, "failed").await.unwrap(),
        redefer::queue::AfterFailure::Retrying { .. }
    ));
    assert!(q.bury(&again[1].lease, "poison").await.unwrap());
    assert!(q.ack(&again[2].lease).await.unwrap());
    assert_eq!(q.operator().stats().await.unwrap(), stats(2, 0, 0, 1));

    // The rest runs: "b-later" once due, "a0" after its backoff.
    let mut rest = Vec::new();
    while rest.len() < 2 {
        let job = next_claimed(&q, "the remaining jobs").await;
        assert!(q.ack(&job.lease).await.unwrap());
        rest.push(job.envelope.payload);
    }
    rest.sort();
    assert_eq!(rest, ["a0", "b-later"]);
    assert_eq!(q.operator().stats().await.unwrap(), stats(0, 0, 0, 1));
    assert_eq!(q.operator().groups(10).await.unwrap().groups, 0);
    assert_eq!(q.operator().purge(JobSet::Dead).await.unwrap(), 1);
}

/// Purging the waiting jobs takes the ready ones too, and empties the groups' backlogs.
async fn purging_the_waiting_jobs_takes_the_ready_ones<St: QueueStore>(store: St) {
    let q = queue(store);
    q.in_group(group("a"))
        .push_many(&payloads("a", 5), Duration::ZERO)
        .await
        .unwrap();
    q.in_group(group("a"))
        .push(&"later".to_string(), Duration::from_secs(60))
        .await
        .unwrap();
    q.push(&"ungrouped".to_string(), Duration::ZERO).await.unwrap();
    assert_eq!(q.operator().purge(JobSet::Waiting).await.unwrap(), 7);
    assert_eq!(q.operator().stats().await.unwrap(), QueueStats::default());
    assert_eq!(q.operator().groups(10).await.unwrap().groups, 0);
    assert!(q.claim(10, LEASE).await.unwrap().jobs.is_empty());
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Edit {
    key: String,
    tenant: String,
}

/// When each edit started: (key, instant).
type Starts = Arc<Mutex<Vec<(String, tokio::time::Instant)>>>;

/// A job handed its key runs at once, ahead of its own group's backlog: the key is held for
/// it. Tenant A's 300 edits of other documents wait in A's turn; A's edit of the held
/// document, deferred in its line, is handed the document at its release and starts before
/// all but the few backlog edits already claimed (in A's turn it would wait for the rest).
async fn a_job_handed_its_key_runs_ahead_of_every_groups_turn<St: QueueStore + LockStore>(store: St) {
    let queue = DelayQueue::<Edit, _>::new(store.clone(), "edits").unwrap();
    let starts = Starts::default();
    let recorded = Arc::clone(&starts);
    let service = LockLayer::new(store.clone(), |edit: &Edit| Some(edit.key.clone()))
        .on_conflict(Defer::new(queue.clone()).group(|edit: &Edit| JobGroup::new(edit.tenant.clone()).ok()))
        .layer(service_fn(move |edit: Edit| {
            let starts = Arc::clone(&recorded);
            async move {
                starts
                    .lock()
                    .unwrap()
                    .push((edit.key, tokio::time::Instant::now()));
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok::<_, std::convert::Infallible>(())
            }
        }));
    let held = LockKey::new("doc:held").unwrap();
    let holder = LockToken::random();
    store
        .try_acquire(&held, holder, Duration::from_secs(30))
        .await
        .unwrap();
    let edit = Edit {
        key: "doc:held".to_string(),
        tenant: "a".to_string(),
    };
    assert!(matches!(
        service.clone().oneshot(edit).await,
        Ok(Outcome::Deferred(_))
    ));
    let backlog: Vec<Edit> = (0..300)
        .map(|n| Edit {
            key: format!("doc:{n}"),
            tenant: "a".to_string(),
        })
        .collect();
    queue
        .in_group(group("a"))
        .push_many(&backlog, Duration::ZERO)
        .await
        .unwrap();
    let scheduler = Scheduler::new(queue.clone(), service)
        .options(SchedulerOptions {
            concurrency: 2,
            batch: 4,
            ..SchedulerOptions::default()
        })
        .start();
    eventually(Duration::from_secs(10), "the backlog started", || async {
        (starts.lock().unwrap().len() >= 10).then_some(())
    })
    .await;
    assert!(store.release(&held, holder).await.unwrap());
    let released_at = starts.lock().unwrap().len();
    let started_before = eventually(Duration::from_secs(20), "the handed edit started", || async {
        let starts = starts.lock().unwrap();
        starts.iter().position(|(key, _)| key == "doc:held")
    })
    .await;
    scheduler.shutdown().await;
    let overtaken = started_before.saturating_sub(released_at);
    assert!(
        overtaken <= 16,
        "{overtaken} backlog edits started between the release and the handed edit (of {})",
        300 - released_at.min(300)
    );
}

/// `Coalesce` puts a key's waiting job in the group of the request that stored it (requests
/// that join it leave it there): once due, it waits behind its own group's backlog, where an
/// ungrouped job would take a turn of its own at once.
async fn a_coalesced_job_waits_in_its_groups_turn<St: redefer::queue::PendingStore + LockStore>(store: St) {
    let queue = DelayQueue::<Edit, _>::new(store.clone(), "edits").unwrap();
    let service = LockLayer::new(store.clone(), |edit: &Edit| Some(edit.key.clone()))
        .on_conflict(
            Coalesce::latest(queue.clone()).group(|edit: &Edit| JobGroup::new(edit.tenant.clone()).ok()),
        )
        .layer(service_fn(|_: Edit| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    let backlog: Vec<Edit> = (0..30)
        .map(|n| Edit {
            key: format!("doc:{n}"),
            tenant: "small".to_string(),
        })
        .collect();
    queue
        .in_group(group("small"))
        .push_many(&backlog, Duration::ZERO)
        .await
        .unwrap();
    let held = LockKey::new("doc:held").unwrap();
    store
        .try_acquire(&held, LockToken::random(), Duration::from_secs(30))
        .await
        .unwrap();
    for tenant in ["small", "other"] {
        let edit = Edit {
            key: "doc:held".to_string(),
            tenant: tenant.to_string(),
        };
        assert!(matches!(
            service.clone().oneshot(edit).await,
            Ok(Outcome::Deferred(_))
        ));
    }
    let stats = queue.operator().stats().await.unwrap();
    assert_eq!(stats.waiting, 31, "one job for the held key");
    let coalesced = queue
        .operator()
        .list(JobSet::Waiting, 100)
        .await
        .unwrap()
        .into_iter()
        .find(|entry| matches!(&entry.envelope, Some(Ok(envelope)) if envelope.payload.key == "doc:held"))
        .unwrap();
    let id = redefer::queue::JobId::new(coalesced.id).unwrap();
    assert!(queue.operator().run_now(&id).await.unwrap());
    let first = queue.claim(10, LEASE).await.unwrap().jobs;
    assert_eq!(first.len(), 10);
    assert!(
        first.iter().all(|job| job.envelope.payload.key != "doc:held"),
        "the coalesced job waits behind its group's backlog"
    );
}

for_each_store!(
    a_small_group_is_not_behind_a_large_groups_backlog,
    weighted_groups_share_the_claims_in_proportion,
    a_group_alone_takes_every_claim_in_push_order,
    grouped_jobs_keep_every_guarantee_of_the_queue,
    purging_the_waiting_jobs_takes_the_ready_ones,
    a_job_handed_its_key_runs_ahead_of_every_groups_turn,
    a_coalesced_job_waits_in_its_groups_turn,
);
