//! The queue's scripts checked against its model (`redefer::queue::model`): generated
//! sequences of pushes (in no group, or in one of two groups of different weights), pushes as
//! a key's pending job (kept first or latest, debounced, arrived before the job's request),
//! jobs handed a lock key (the first in its line made due, the runner-up due when the
//! reservation runs out), waiting jobs buried by a full line, claims by two schedulers, acks (the job kept as done, or forgotten),
//! retries, burials, lease extensions, each of them again on a job its scheduler already
//! settled (a second ack, an extension or a burial of a job acked, retried or claimed again),
//! cancels and leases that run out (a scheduler that died), and an operator's pauses, runs now,
//! requeues, purges, counts, listings and the groups' backlogs, run one by one on the model and on a real Redis 7
//! and Valkey 9 through the Redis store, and the idempotency guard's requests of the same ids
//! (begun, kept running, ended) on its model (`redefer::idempotency::model`) and
//! `request_record.lua`. After every operation the replies agree (the jobs each claim took,
//! which ack, retry, burial, extension, cancel, run now or requeue acted, whether the queue was
//! paused, how many a purge deleted, the counts, the ids a listing found, each group's backlog,
//! what a request found of its id), and so does where each job is (waiting and when due, in flight and until when,
//! dead, or gone after its ack). Job fencing tokens rise on both.
//!
//! Time: the scripts read the server's clock, which the test cannot move, so the model's clock
//! is the server's, read just before each operation. Everything the test makes due is due an
//! hour before or after it (a push at a set time, a retry an hour on, a debounced push), half
//! an hour after it (a runner-up in line) or at the moment of the operation (a retry at once,
//! the first in line), and times are compared within [`TIME_TOLERANCE`]: where a job
//! is never turns on the milliseconds between the two clocks. A lease runs out by its
//! deadline set in the past on both (its `INFLIGHT` score; the model's claim).
//!
//! `PROPTEST_CASES` raises the number of sequences per server (the default fits CI).

use crate::differential;
use crate::support;

use std::time::{Duration, SystemTime};

use differential::{Sequence, fail};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use redefer::LockKey;
use redefer::RedisStore;
use redefer::debounce::Debounce;
use redefer::guard::Waiter;
use redefer::idempotency::model::RequestModel;
use redefer::idempotency::{Begun, IdempotencyStore};
use redefer::lock::{Acquisition, Fencing, Holders, LockStore, LockToken};
use redefer::queue::model::{Promotion, QueueModel};
use redefer::queue::{
    Cancelled, ClaimLimits, ControlQueue, Counters, Due, Hold, InspectQueue, JobGroup, JobId, JobSet, Keep,
    PendingJob, PendingPush, PendingRules, PendingStore, QueueCore, QueueGroups, QueueName, QueueStats,
    RawJobState, Retention,
};
use redis::aio::ConnectionManager;

use support::{RedisServer, Server};

/// How far the two sides' times may differ: the time an operation takes, and the two clocks'
/// readings around it.
const TIME_TOLERANCE: Duration = Duration::from_millis(250);
const LEASE: Duration = Duration::from_secs(30);
const HOUR_MS: i64 = 3_600_000;
const HOUR: Duration = Duration::from_secs(3_600);
const JOBS: usize = 4;
const SCHEDULERS: usize = 2;
/// What a kept ack keeps: more jobs than there are, an hour each, so that which finished job
/// goes first never turns on the milliseconds between the two clocks.
const RETENTION: Retention = Retention {
    max_count: 100,
    max_age: HOUR,
};
/// The requests of each id the idempotency guard's operations are of.
const REQUESTS: usize = 2;
/// The groups a push may put its job in, with their weights: a claim of fewer jobs than are
/// due takes them in the groups' turns, three of the second's for one of the first's.
const GROUPS: [(&str, u32); 2] = [("light", 1), ("heavy", 3)];
/// The lock keys whose pending jobs the pushes as a key's pending job are.
const PENDING_KEYS: usize = 2;
/// How long a lock key is reserved for the job it is handed to: half an hour, so that a
/// runner-up due in an hour is made due sooner, and never within the tolerance of another time.
const RESERVATION: Duration = Duration::from_secs(1_800);
/// What the store adds to the reservation for the runner-up (`RUNNER_UP_MARGIN` in
/// `src/store/handover.rs`): the runner-up is due after the reservation and this.
const RUNNER_UP_MARGIN: Duration = Duration::from_millis(20);
const LIMITS: ClaimLimits = ClaimLimits {
    max_envelope: 64,
    max_expiries: 2,
};

#[derive(Debug, Clone)]
enum Op {
    /// Pushes the job due an hour ago (`past`) or in an hour, in one of [`GROUPS`] or none.
    Push {
        job: usize,
        past: bool,
        group: Option<usize>,
    },
    /// Pushes the job as the pending job of one of [`PENDING_KEYS`], due as [`Op::Push`]:
    /// stored, or joining the key's waiting job, keeping the first request or the latest
    /// (debounced: due an hour after the push, at most two after the job's first), as a
    /// request that arrived two hours ago (`older`) or now.
    PushPending {
        job: usize,
        key: usize,
        past: bool,
        group: Option<usize>,
        latest: bool,
        debounced: bool,
        older: bool,
    },
    /// A lock key's holder releases it with the job first in its line and, if given, another
    /// job second: the first is made due now, the runner-up when the reservation runs out (a
    /// job gone is passed over). A new key each time.
    Handed {
        first: usize,
        runner_up: Option<usize>,
    },
    /// A full line drops the job: buried if it waits.
    BuryWaiting {
        job: usize,
    },
    Claim {
        scheduler: usize,
        max: usize,
    },
    /// A scheduler acts on a job it claimed (its `belief`-th, by its place in its claims).
    /// Acks the job: kept in the done set ([`RETENTION`]), or forgotten.
    Ack {
        scheduler: usize,
        belief: usize,
        kept: bool,
    },
    Retry {
        scheduler: usize,
        belief: usize,
        at_once: bool,
    },
    Bury {
        scheduler: usize,
        belief: usize,
    },
    Extend {
        scheduler: usize,
        belief: usize,
    },
    Cancel {
        job: usize,
    },
    /// A scheduler acts again on a job it already settled (its `belief`-th settled one): a
    /// second ack, a retry, a burial or an extension of a job acked, retried, buried or
    /// claimed again since. Both sides must refuse it alike and change nothing.
    AgainAfterSettled {
        scheduler: usize,
        belief: usize,
        act: Act,
    },
    /// The lease of the scheduler's claim of that job runs out (the scheduler died).
    LeaseRunsOut {
        scheduler: usize,
        belief: usize,
    },
    /// An operator pauses the queue, or resumes it.
    Pause {
        paused: bool,
    },
    RunNow {
        job: usize,
    },
    Requeue {
        job: usize,
    },
    /// Deletes every job of the set.
    Purge {
        set: JobSet,
    },
    Stats,
    /// Reads the groups' backlogs, the largest first.
    Groups,
    /// Lists the set, every job of it in one page.
    List {
        set: JobSet,
    },
    /// A request (one of [`REQUESTS`], by its token) of the job's id begins (the idempotency
    /// guard), held an hour.
    Begin {
        job: usize,
        request: usize,
    },
    /// The request of the job's id keeps its record running for another hour.
    KeepRunning {
        job: usize,
        request: usize,
    },
    /// The request of the job's id ends, kept an hour as finished or forgotten.
    End {
        job: usize,
        request: usize,
        kept: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let scheduler = 0..SCHEDULERS;
    let belief = 0..3usize;
    prop_oneof![
        4 => (0..JOBS, prop::bool::weighted(0.8), prop::option::weighted(0.6, 0..GROUPS.len()))
            .prop_map(|(job, past, group)| Op::Push { job, past, group }),
        3 => (
            (0..JOBS, 0..PENDING_KEYS, prop::bool::weighted(0.8)),
            prop::option::weighted(0.5, 0..GROUPS.len()),
            (any::<bool>(), any::<bool>(), prop::bool::weighted(0.2)),
        )
            .prop_map(|((job, key, past), group, (latest, debounced, older))| Op::PushPending {
                job,
                key,
                past,
                group,
                latest,
                debounced,
                older,
            }),
        2 => (0..JOBS, prop::option::of(0..JOBS)).prop_map(|(first, runner_up)| Op::Handed {
            first,
            runner_up: runner_up.filter(|runner_up| *runner_up != first),
        }),
        1 => (0..JOBS).prop_map(|job| Op::BuryWaiting { job }),
        4 => (scheduler.clone(), 1..4usize).prop_map(|(scheduler, max)| Op::Claim { scheduler, max }),
        3 => (scheduler.clone(), belief.clone(), any::<bool>())
            .prop_map(|(scheduler, belief, kept)| Op::Ack { scheduler, belief, kept }),
        2 => (scheduler.clone(), belief.clone(), any::<bool>())
            .prop_map(|(scheduler, belief, at_once)| Op::Retry { scheduler, belief, at_once }),
        1 => (scheduler.clone(), belief.clone()).prop_map(|(scheduler, belief)| Op::Bury { scheduler, belief }),
        1 => (scheduler.clone(), belief.clone()).prop_map(|(scheduler, belief)| Op::Extend { scheduler, belief }),
        1 => (0..JOBS).prop_map(|job| Op::Cancel { job }),
        2 => (scheduler.clone(), belief.clone(), act())
            .prop_map(|(scheduler, belief, act)| Op::AgainAfterSettled { scheduler, belief, act }),
        2 => (scheduler, belief).prop_map(|(scheduler, belief)| Op::LeaseRunsOut { scheduler, belief }),
        1 => any::<bool>().prop_map(|paused| Op::Pause { paused }),
        1 => (0..JOBS).prop_map(|job| Op::RunNow { job }),
        1 => (0..JOBS).prop_map(|job| Op::Requeue { job }),
        1 => prop::sample::select(&JobSet::ALL[..]).prop_map(|set| Op::Purge { set }),
        1 => Just(Op::Stats),
        1 => Just(Op::Groups),
        1 => prop::sample::select(&JobSet::ALL[..]).prop_map(|set| Op::List { set }),
        2 => (0..JOBS, 0..REQUESTS).prop_map(|(job, request)| Op::Begin { job, request }),
        1 => (0..JOBS, 0..REQUESTS).prop_map(|(job, request)| Op::KeepRunning { job, request }),
        1 => (0..JOBS, 0..REQUESTS, any::<bool>()).prop_map(|(job, request, kept)| Op::End { job, request, kept }),
    ]
}

/// What a scheduler does to a job it claimed.
#[derive(Debug, Clone, Copy)]
enum Act {
    /// Acks it: kept in the done set ([`RETENTION`]), or forgotten.
    Ack {
        kept: bool,
    },
    /// Retries it, at once or an hour on.
    Retry {
        at_once: bool,
    },
    Bury,
    Extend,
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        any::<bool>().prop_map(|kept| Act::Ack { kept }),
        any::<bool>().prop_map(|at_once| Act::Retry { at_once }),
        Just(Act::Bury),
        Just(Act::Extend),
    ]
}

/// A job a scheduler claimed, with its hold on each side (the fences differ).
#[derive(Debug, Clone)]
struct Belief {
    job: usize,
    model: Hold,
    redis: Hold,
}

/// Where a job is, the same way for both: its set and its time (ms since the epoch), or gone.
#[derive(Debug, Clone, Copy)]
enum Place {
    Waiting(i64),
    InFlight(i64),
    Dead,
    Gone,
}

#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Stored(Vec<bool>),
    Claimed(Vec<usize>),
    Acted(bool),
    Cancelled(Cancelled),
    Counted(usize),
    Stats(QueueStats),
    Groups(QueueGroups),
    Listed(Vec<String>),
    Begun(Begun),
    /// A push as a key's pending job: what it did, its due time aside (compared within the
    /// tolerance).
    Pending(PendingPush),
    Done,
}

struct Run {
    model: QueueModel,
    requests: RequestModel,
    store: RedisStore,
    redis: ConnectionManager,
    queue: QueueName,
    ids: Vec<JobId>,
    pending_keys: Vec<LockKey>,
    /// The lock keys handed so far: each hand-over takes a new one.
    handed: usize,
    groups: Vec<JobGroup>,
    tokens: Vec<LockToken>,
    requesters: Vec<LockToken>,
    beliefs: Vec<Vec<Belief>>,
    /// The jobs each scheduler settled, as it claimed them.
    settled: Vec<Vec<Belief>>,
    /// The last job fencing token on each side.
    fences: [u64; 2],
    /// An hour from the first operation, ms since the epoch: pushes are due an hour either side.
    base: i64,
}

fn epoch_ms(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

impl Place {
    /// The same place, its times within the tolerance of each other.
    fn agrees_with(self, other: Place) -> bool {
        let close = |a: i64, b: i64| (a - b).unsigned_abs() <= TIME_TOLERANCE.as_millis() as u64;
        match (self, other) {
            (Place::Waiting(a), Place::Waiting(b)) | (Place::InFlight(a), Place::InFlight(b)) => close(a, b),
            (Place::Dead, Place::Dead) | (Place::Gone, Place::Gone) => true,
            _ => false,
        }
    }
}

impl Sequence for Run {
    type Op = Op;
    const REGRESSIONS: &str = "tests/queue_model.proptest-regressions";

    async fn start(server: &RedisServer) -> Self {
        let prefix = support::unique_prefix();
        let store = support::store_at(&server.url(), &prefix)
            .await
            .with_reservation(RESERVATION);
        let client = redis::Client::open(server.url()).expect("a valid URL");
        let mut redis = ConnectionManager::new(client)
            .await
            .expect("connect to the test server");
        let base = server_ms(&mut redis).await.expect("the server's clock");
        Run {
            model: QueueModel::default(),
            requests: RequestModel::default(),
            store,
            redis,
            queue: QueueName::new("model").expect("a valid queue name"),
            ids: (0..JOBS)
                .map(|n| JobId::new(format!("job-{n}")).expect("a valid id"))
                .collect(),
            pending_keys: (0..PENDING_KEYS)
                .map(|n| LockKey::new(format!("pending-{n}")).expect("a valid key"))
                .collect(),
            handed: 0,
            groups: GROUPS
                .iter()
                .map(|(name, weight)| {
                    JobGroup::new(*name)
                        .and_then(|group| group.weight(*weight))
                        .expect("a valid group")
                })
                .collect(),
            tokens: (0..SCHEDULERS).map(|_| LockToken::random()).collect(),
            requesters: (0..REQUESTS).map(|_| LockToken::random()).collect(),
            beliefs: vec![Vec::new(); SCHEDULERS],
            settled: vec![Vec::new(); SCHEDULERS],
            fences: [0; 2],
            base,
        }
    }

    async fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let now = server_ms(&mut self.redis).await?;
        let (model, redis) = match *op {
            Op::Push { job, past, group } => {
                let due = self.due(job, past);
                let jobs = [(self.ids[job].clone(), envelope(job))];
                let group = group.map(|group| &self.groups[group]);
                let model = self.model.push_many(&jobs, due, group, now);
                let at = at_epoch_ms(due);
                let (_, redis) = self
                    .store
                    .push_many_in_group(&self.queue, &jobs, Due::At(at), group)
                    .await
                    .map_err(fail)?;
                (Reply::Stored(model), Reply::Stored(redis))
            }
            Op::PushPending {
                job,
                key,
                past,
                group,
                latest,
                debounced,
                older,
            } => {
                let due = self.due(job, past);
                let (key, id) = (&self.pending_keys[key], &self.ids[job]);
                let group = group.map(|group| &self.groups[group]);
                let rules = PendingRules {
                    keep: if latest { Keep::Latest } else { Keep::First },
                    debounce: debounced.then(|| Debounce::new(HOUR, 2 * HOUR).expect("a valid debounce")),
                    counters: Counters::Off,
                    arrived_ago: if older { 2 * HOUR } else { Duration::ZERO },
                };
                let pushed = PendingJob {
                    key,
                    id,
                    envelope: envelope(job),
                    group,
                    rules,
                };
                let model = self.model.push_pending(pushed.clone(), due, now);
                let redis = self
                    .store
                    .push_pending(&self.queue, pushed, Due::At(at_epoch_ms(due)))
                    .await
                    .map_err(fail)?;
                let (model_due, redis_due) = (pending_due(&model), pending_due(&redis));
                prop_assert!(
                    Place::Waiting(model_due).agrees_with(Place::Waiting(redis_due)),
                    "due {} in the model, {} on the server, after {:?}",
                    model_due,
                    redis_due,
                    op
                );
                (
                    Reply::Pending(without_due(model)),
                    Reply::Pending(without_due(redis)),
                )
            }
            Op::Handed { first, runner_up } => {
                self.handed += 1;
                let key = LockKey::new(format!("handed-{}", self.handed)).map_err(fail)?;
                let holder = LockToken::random();
                let acquired = self
                    .store
                    .acquire(&key, holder, HOUR, Holders::One, None, Fencing::Off)
                    .await
                    .map_err(fail)?;
                prop_assert!(matches!(acquired, Acquisition::Acquired(_)), "{:?}", acquired);
                for job in std::iter::once(first).chain(runner_up) {
                    let waiter = Waiter::job(&self.queue, &self.ids[job]);
                    self.store
                        .join_line(&key, &waiter, None, Holders::One, None)
                        .await
                        .map_err(fail)?;
                }
                let released = self
                    .store
                    .release_holding(&key, holder, Holders::One, None)
                    .await
                    .map_err(fail)?;
                prop_assert!(released);
                self.hand_over_in_model(first, runner_up, now);
                (Reply::Done, Reply::Done)
            }
            Op::BuryWaiting { job } => {
                let id = &self.ids[job];
                let model = self.model.bury_waiting(id, "dropped", Counters::Off, now);
                let redis = self
                    .store
                    .bury_waiting(&self.queue, id, "dropped", Counters::Off)
                    .await
                    .map_err(fail)?;
                (Reply::Acted(model), Reply::Acted(redis))
            }
            Op::Claim { scheduler, max } => {
                let token = self.tokens[scheduler];
                let model = self.model.claim(max, LEASE, token, LIMITS, Counters::Off, now);
                let redis = self
                    .store
                    .claim(&self.queue, max, LEASE, token, LIMITS, Counters::Off)
                    .await
                    .map_err(fail)?;
                let job_of = |id: &JobId| {
                    self.ids
                        .iter()
                        .position(|known| known == id)
                        .unwrap_or(usize::MAX)
                };
                let mut model_jobs: Vec<usize> = model.jobs.iter().map(|job| job_of(&job.id)).collect();
                let mut redis_jobs: Vec<usize> = redis.jobs.iter().map(|job| job_of(&job.id)).collect();
                for (side, jobs) in [&model.jobs, &redis.jobs].into_iter().enumerate() {
                    for job in jobs {
                        prop_assert!(
                            job.fence > self.fences[side],
                            "side {}: fence {} after {}",
                            side,
                            job.fence,
                            self.fences[side]
                        );
                        self.fences[side] = job.fence;
                    }
                }
                // Beliefs in the model's claim order, each with the other side's hold.
                for job in &model.jobs {
                    if let Some(theirs) = redis.jobs.iter().find(|theirs| theirs.id == job.id) {
                        self.beliefs[scheduler].push(Belief {
                            job: job_of(&job.id),
                            model: Hold::of(token, job),
                            redis: Hold::of(token, theirs),
                        });
                    }
                }
                // Jobs due within the tolerance of each other may come in either order.
                model_jobs.sort_unstable();
                redis_jobs.sort_unstable();
                (Reply::Claimed(model_jobs), Reply::Claimed(redis_jobs))
            }
            Op::Ack {
                scheduler,
                belief,
                kept,
            } => self.settle(scheduler, belief, Act::Ack { kept }, now).await?,
            Op::Retry {
                scheduler,
                belief,
                at_once,
            } => {
                self.settle(scheduler, belief, Act::Retry { at_once }, now)
                    .await?
            }
            Op::Bury { scheduler, belief } => self.settle(scheduler, belief, Act::Bury, now).await?,
            Op::Extend { scheduler, belief } => {
                let Some(belief) = self.beliefs[scheduler].get(belief).cloned() else {
                    return Ok(());
                };
                self.act(&belief, Act::Extend, now).await?
            }
            Op::AgainAfterSettled {
                scheduler,
                belief,
                act,
            } => {
                let Some(belief) = self.settled[scheduler].get(belief).cloned() else {
                    return Ok(());
                };
                self.act(&belief, act, now).await?
            }
            Op::Cancel { job } => {
                let model = self.model.cancel(&self.ids[job]);
                let redis = self
                    .store
                    .cancel(&self.queue, &self.ids[job])
                    .await
                    .map_err(fail)?;
                (Reply::Cancelled(model), Reply::Cancelled(redis))
            }
            Op::LeaseRunsOut { scheduler, belief } => {
                let Some(belief) = self.beliefs[scheduler].get(belief).cloned() else {
                    return Ok(());
                };
                let past = now - LEASE.as_millis() as i64;
                self.model
                    .extend_lease(&self.ids[belief.job], belief.model, Duration::ZERO, past);
                let mut lease = belief.redis.token.to_hex().to_vec();
                lease.extend_from_slice(format!(":{}", belief.redis.claim).as_bytes());
                let inflight = format!("{}:q:{{{}}}:inflight", self.store.prefix().as_str(), self.queue);
                let _: i64 = redis::cmd("ZADD")
                    .arg(&inflight)
                    .arg("XX")
                    .arg(past)
                    .arg(&lease)
                    .query_async(&mut self.redis)
                    .await
                    .map_err(fail)?;
                let found: Option<i64> = redis::cmd("ZSCORE")
                    .arg(&inflight)
                    .arg(&lease)
                    .query_async(&mut self.redis)
                    .await
                    .map_err(fail)?;
                // A lease that holds no job any more is gone on Redis, as its claim in the model.
                let held = matches!(self.model.locate(&self.ids[belief.job]), Some((JobSet::InFlight, Some(hold), _)) if hold == belief.model);
                prop_assert!(
                    found.is_some() || !held,
                    "the lease of {:?} is in INFLIGHT",
                    belief
                );
                (Reply::Done, Reply::Done)
            }
            Op::Pause { paused } => {
                let model = self.model.pause(paused);
                let redis = self.store.pause(&self.queue, paused).await.map_err(fail)?;
                (Reply::Acted(model), Reply::Acted(redis))
            }
            Op::RunNow { job } => {
                let model = self.model.run_now(&self.ids[job], now);
                let redis = self
                    .store
                    .run_now(&self.queue, &self.ids[job])
                    .await
                    .map_err(fail)?;
                (Reply::Acted(model), Reply::Acted(redis))
            }
            Op::Requeue { job } => {
                let ids = std::slice::from_ref(&self.ids[job]);
                let model = self.model.requeue(ids, now);
                let redis = self.store.requeue(&self.queue, ids).await.map_err(fail)?;
                (Reply::Counted(model), Reply::Counted(redis))
            }
            Op::Purge { set } => {
                let model = self.model.purge(set, JOBS);
                let redis = self.store.purge(&self.queue, set, JOBS).await.map_err(fail)?;
                (Reply::Counted(model), Reply::Counted(redis))
            }
            Op::Stats => {
                let model = self.model.stats(now);
                let redis = self.store.stats(&self.queue).await.map_err(fail)?;
                (Reply::Stats(model), Reply::Stats(redis))
            }
            Op::Groups => {
                let model = self.model.groups(GROUPS.len());
                let redis = self.store.groups(&self.queue, GROUPS.len()).await.map_err(fail)?;
                (Reply::Groups(model), Reply::Groups(redis))
            }
            Op::List { set } => {
                // Which jobs, not their order: jobs due within the tolerance of each other may
                // be listed in either order.
                let ids = |listed: Vec<redefer::queue::ListedJob>| {
                    let mut ids: Vec<String> = listed.into_iter().map(|job| job.id).collect();
                    ids.sort_unstable();
                    ids
                };
                let model = ids(self.model.list(set, None, JOBS));
                let redis = ids(self
                    .store
                    .list(&self.queue, set, None, JOBS)
                    .await
                    .map_err(fail)?);
                (Reply::Listed(model), Reply::Listed(redis))
            }
            Op::Begin { job, request } => {
                let (id, token) = (&self.ids[job], self.requesters[request]);
                let as_job = self.model.locate(id).map(|(set, ..)| set);
                let model = self.requests.begin(id, as_job, token, HOUR, at(now));
                let redis = self
                    .store
                    .begin_request(&self.queue, id, token, HOUR)
                    .await
                    .map_err(fail)?;
                (Reply::Begun(model), Reply::Begun(redis))
            }
            Op::KeepRunning { job, request } => {
                let (id, token) = (&self.ids[job], self.requesters[request]);
                let model = self.requests.extend(id, token, HOUR, at(now));
                let redis = self
                    .store
                    .extend_request(&self.queue, id, token, HOUR)
                    .await
                    .map_err(fail)?;
                (Reply::Acted(model), Reply::Acted(redis))
            }
            Op::End { job, request, kept } => {
                let (id, token, keep) = (&self.ids[job], self.requesters[request], kept.then_some(HOUR));
                self.requests.end(id, token, keep, at(now));
                self.store
                    .end_request(&self.queue, id, token, keep)
                    .await
                    .map_err(fail)?;
                (Reply::Done, Reply::Done)
            }
        };
        prop_assert_eq!(model, redis, "the replies to {:?}", op);
        for job in 0..JOBS {
            let model = self.model_place(job);
            let redis = self.redis_place(job).await?;
            prop_assert!(
                model.agrees_with(redis),
                "job {}: {:?} in the model, {:?} on the server, after {:?}",
                job,
                model,
                redis,
                op
            );
        }
        Ok(())
    }
}

impl Run {
    /// When a push of `job` is due: an hour ago (`past`) or in an hour, a millisecond apart
    /// per job.
    fn due(&self, job: usize, past: bool) -> i64 {
        let hour = if past { -HOUR_MS } else { HOUR_MS };
        self.base + hour + job as i64
    }

    /// What the store's hand-over does after the release (`src/store/handover.rs`), on the
    /// model: the first in line made due now, or, gone, passed over to the runner-up, made due
    /// now instead; once one was woken, the runner-up due when the reservation runs out.
    fn hand_over_in_model(&mut self, first: usize, runner_up: Option<usize>, now: i64) {
        let woken = [Some(first), runner_up]
            .into_iter()
            .flatten()
            .any(|job| self.model.promote(&self.ids[job], Duration::ZERO, now) != Promotion::Gone);
        if let Some(runner_up) = runner_up.filter(|_| woken) {
            self.model
                .promote(&self.ids[runner_up], RESERVATION + RUNNER_UP_MARGIN, now);
        }
    }

    /// The scheduler settles its `belief`-th claimed job by `act`, and keeps it among the
    /// jobs it settled.
    async fn settle(
        &mut self,
        scheduler: usize,
        belief: usize,
        act: Act,
        now: i64,
    ) -> Result<(Reply, Reply), TestCaseError> {
        let Some(belief) = self.take_belief(scheduler, belief) else {
            return Ok((Reply::Done, Reply::Done));
        };
        let replies = self.act(&belief, act, now).await?;
        self.settled[scheduler].push(belief);
        Ok(replies)
    }

    /// Does `act` to the job of `belief` on both sides: the replies.
    async fn act(&mut self, belief: &Belief, act: Act, now: i64) -> Result<(Reply, Reply), TestCaseError> {
        let id = &self.ids[belief.job];
        Ok(match act {
            Act::Ack { kept } => {
                let retention = kept.then_some(RETENTION);
                let model = self
                    .model
                    .ack(&[(id, belief.model)], retention, Counters::Off, now);
                let redis = self
                    .store
                    .ack(&self.queue, &[(id, belief.redis)], retention, Counters::Off)
                    .await
                    .map_err(fail)?;
                (Reply::Stored(model), Reply::Stored(redis))
            }
            Act::Retry { at_once } => {
                let delay = if at_once {
                    Duration::ZERO
                } else {
                    Duration::from_millis(HOUR_MS as u64)
                };
                let model = self
                    .model
                    .retry(id, belief.model, None, delay, Counters::Off, now);
                let redis = self
                    .store
                    .retry(&self.queue, id, belief.redis, None, delay, Counters::Off)
                    .await
                    .map_err(fail)?;
                (Reply::Acted(model.is_some()), Reply::Acted(redis.is_some()))
            }
            Act::Bury => {
                let model = self
                    .model
                    .bury(id, belief.model, "buried", None, Counters::Off, now);
                let redis = self
                    .store
                    .bury(&self.queue, id, belief.redis, "buried", None, Counters::Off)
                    .await
                    .map_err(fail)?;
                (Reply::Acted(model), Reply::Acted(redis))
            }
            Act::Extend => {
                let model = self.model.extend_lease(id, belief.model, LEASE, now);
                let redis = self
                    .store
                    .extend_lease(&self.queue, id, belief.redis, LEASE)
                    .await
                    .map_err(fail)?;
                (Reply::Acted(model), Reply::Acted(redis))
            }
        })
    }

    fn take_belief(&mut self, scheduler: usize, belief: usize) -> Option<Belief> {
        (belief < self.beliefs[scheduler].len()).then(|| self.beliefs[scheduler].remove(belief))
    }

    fn model_place(&self, job: usize) -> Place {
        match self.model.locate(&self.ids[job]) {
            Some((JobSet::Waiting, _, Some(due))) => Place::Waiting(due),
            Some((JobSet::InFlight, _, Some(until))) => Place::InFlight(until),
            Some((JobSet::Dead, _, _)) => Place::Dead,
            _ => Place::Gone,
        }
    }

    async fn redis_place(&mut self, job: usize) -> Result<Place, TestCaseError> {
        let found = self
            .store
            .inspect(&self.queue, &self.ids[job])
            .await
            .map_err(fail)?;
        Ok(match found.state {
            RawJobState::Delayed { due } => Place::Waiting(epoch_ms(due)),
            RawJobState::InFlight { lease_until } => Place::InFlight(epoch_ms(lease_until)),
            RawJobState::Dead { .. } => Place::Dead,
            RawJobState::Done { .. } | RawJobState::Missing => Place::Gone,
        })
    }
}

/// The envelope of a job's pushes.
fn envelope(job: usize) -> Vec<u8> {
    format!("{{\"n\":{job}}}").into_bytes()
}

/// The time `ms` after the epoch.
fn at_epoch_ms(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs())
}

/// When a pending push said the job is due, ms since the epoch (0 where it says nothing).
fn pending_due(push: &PendingPush) -> i64 {
    match push {
        PendingPush::Stored { due } | PendingPush::Joined { due, .. } | PendingPush::Newer { due, .. } => {
            epoch_ms(*due)
        }
        PendingPush::EncodeFor(_) | PendingPush::Moved => 0,
    }
}

/// A pending push with its due time taken out (compared apart, within the tolerance).
fn without_due(push: PendingPush) -> PendingPush {
    let due = SystemTime::UNIX_EPOCH;
    match push {
        PendingPush::Stored { .. } => PendingPush::Stored { due },
        PendingPush::Joined { id, revision, .. } => PendingPush::Joined { id, revision, due },
        PendingPush::Newer { id, revision, .. } => PendingPush::Newer { id, revision, due },
        other => other,
    }
}

/// The request records' clock at `now` (ms since the epoch): records live an hour, so the
/// milliseconds between the two clocks never decide.
fn at(now: i64) -> Duration {
    Duration::from_millis(now.unsigned_abs())
}

/// The server's clock, ms since the epoch.
async fn server_ms(redis: &mut ConnectionManager) -> Result<i64, TestCaseError> {
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query_async(redis).await.map_err(fail)?;
    Ok(seconds * 1000 + micros / 1000)
}

#[test]
fn redis_queue_scripts_agree_with_the_model() {
    differential::agree::<Run>(Server::Redis, op());
}

#[test]
fn valkey_queue_scripts_agree_with_the_model() {
    differential::agree::<Run>(Server::Valkey, op());
}

/// Found by the generated sequences (a CI run of `redis_queue_scripts_agree_with_the_model`):
/// an id kept as done, pushed again and buried is in both the done and the dead set; a request
/// for it finds it dead (its latest job) in the model, where the script answered done.
#[test]
fn a_request_for_an_id_both_done_and_dead_finds_it_dead() {
    let ops = [
        Op::PushPending {
            job: 3,
            key: 0,
            past: true,
            group: None,
            latest: false,
            debounced: false,
            older: false,
        },
        Op::Claim { scheduler: 1, max: 1 },
        Op::Ack {
            scheduler: 1,
            belief: 0,
            kept: true,
        },
        Op::Push {
            job: 3,
            past: false,
            group: None,
        },
        Op::BuryWaiting { job: 3 },
        Op::Begin { job: 3, request: 0 },
    ];
    for server in [Server::Redis, Server::Valkey] {
        differential::replay::<Run>(server, &ops);
    }
}
