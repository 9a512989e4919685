//! Property tests of the guarantees, against MemoryStore and a real Redis:
//! - lock operations by several holders, in generated interleavings with expiry, behave as
//!   the reference model says: one holder at most, fencing tokens strictly increasing;
//! - generated claim workloads (jobs, due offsets, claimers, batch sizes, ack / retry / crash,
//!   hostile entries written by other clients mixed in) never hand a job to two live claimers,
//!   lose nothing, leave nothing, count attempts exactly, and bury every hostile entry with a
//!   reason.
//!
//! `PROPTEST_CASES` raises the number of cases for long runs (the defaults fit CI).

use crate::support;

use crate::support::Shorthand;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use redefer::lock::{Acquisition, LockStore};
use redefer::queue::{DelayQueue, JobId, RetryPolicy};
use redefer::queue::{QueueStats, QueueStore};
use redefer::{Backoff, FencingToken, LockKey, LockToken, MemoryStore};
use tokio::time::Instant;

use support::RedisServer;

/// Cases per property: `PROPTEST_CASES` when set, otherwise `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------- lock model

#[derive(Debug, Clone, Copy)]
enum LockOp {
    Acquire(usize),
    Extend(usize),
    Release(usize),
    /// The lock's TTL runs out (whoever holds it).
    Expire,
}

fn lock_ops() -> impl Strategy<Value = Vec<LockOp>> {
    let holder = 0usize..4;
    let op = prop_oneof![
        4 => holder.clone().prop_map(LockOp::Acquire),
        2 => holder.clone().prop_map(LockOp::Extend),
        3 => holder.prop_map(LockOp::Release),
        1 => Just(LockOp::Expire),
    ];
    proptest::collection::vec(op, 1..60)
}

/// What the store must answer, by the documented semantics: who holds the lock, and the
/// fence of its holding. A fence is not predicted exactly (a store may skip numbers, e.g. for
/// acquires that failed), only ordered: a new holding's fence is above every fence handed out
/// before, and a holder's repeated acquire answers at least its own.
#[derive(Default)]
struct LockModel {
    holder: Option<(usize, FencingToken)>,
    /// The highest fence the store has answered.
    highest: Option<FencingToken>,
}

impl LockModel {
    /// Checks an acquire by `who` that answered `got`, and records it.
    fn acquire(&mut self, who: usize, got: Option<FencingToken>) -> Result<(), String> {
        match (self.holder, got) {
            (Some((holder, fence)), Some(again)) if holder == who => {
                if again < fence {
                    return Err(format!(
                        "the holder's acquire went back from {fence:?} to {again:?}"
                    ));
                }
            }
            (Some((holder, _)), None) if holder != who => {}
            (None, Some(fence)) => {
                if self.highest.is_some_and(|highest| fence <= highest) {
                    return Err(format!(
                        "a new holding got {fence:?}, not above {:?}",
                        self.highest
                    ));
                }
                self.holder = Some((who, fence));
            }
            (holder, got) => {
                return Err(format!(
                    "acquire answered {got:?} with the lock held by {holder:?}"
                ));
            }
        }
        self.highest = self.highest.max(got);
        Ok(())
    }

    fn holds(&self, who: usize) -> bool {
        self.holder.is_some_and(|(holder, _)| holder == who)
    }
}

/// Runs `ops` against `store` and the model; `expire` makes the lock's TTL run out.
async fn check_lock_ops<S, E, F>(
    store: &S,
    key: &LockKey,
    ops: &[LockOp],
    mut expire: E,
) -> Result<(), String>
where
    S: LockStore,
    E: FnMut() -> F,
    F: std::future::Future<Output = ()>,
{
    const TTL: Duration = Duration::from_secs(30);
    let tokens: Vec<LockToken> = (0..4).map(|_| LockToken::random()).collect();
    let mut model = LockModel::default();
    for (step, op) in ops.iter().enumerate() {
        let context = || format!("step {step} {op:?} of {ops:?}");
        match *op {
            LockOp::Acquire(who) => {
                let got = match store
                    .try_acquire(key, tokens[who], TTL)
                    .await
                    .map_err(|e| e.to_string())?
                {
                    Acquisition::Acquired(fence) => Some(fence.ok_or("try_acquire answered no fence")?),
                    Acquisition::Held { .. } => None,
                };
                model
                    .acquire(who, got)
                    .map_err(|error| format!("{error} at {}", context()))?;
            }
            LockOp::Extend(who) => {
                let got = store
                    .extend(key, tokens[who], TTL)
                    .await
                    .map_err(|e| e.to_string())?;
                if got != model.holds(who) {
                    return Err(format!("extend answered {got} at {}", context()));
                }
            }
            LockOp::Release(who) => {
                let got = store.release(key, tokens[who]).await.map_err(|e| e.to_string())?;
                if got != model.holds(who) {
                    return Err(format!("release answered {got} at {}", context()));
                }
                if got {
                    model.holder = None;
                }
            }
            LockOp::Expire => {
                expire().await;
                model.holder = None;
            }
        }
    }
    Ok(())
}

#[test]
fn lock_operations_follow_the_model_in_memory() {
    let mut runner = TestRunner::new(ProptestConfig::with_cases(cases(256)));
    runner
        .run(&lock_ops(), |ops| {
            // Paused tokio time: expiry is an advance of the clock past the TTL.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            let result = runtime.block_on(async {
                let store = MemoryStore::new();
                let key = LockKey::new("order:1").unwrap();
                check_lock_ops(&store, &key, &ops, || {
                    tokio::time::advance(Duration::from_secs(31))
                })
                .await
            });
            result.map_err(TestCaseError::fail)
        })
        .unwrap();
}

#[test]
fn lock_operations_follow_the_model_on_redis() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime.block_on(server.store());
    let mut runner = TestRunner::new(ProptestConfig::with_cases(cases(64)));
    runner
        .run(&lock_ops(), |ops| {
            let key = LockKey::new(format!("order:{}", rand::random::<u64>())).unwrap();
            let redis_key = store.lock_redis_key(&key);
            let result = runtime.block_on(check_lock_ops(&store, &key, &ops, || {
                // The TTL running out is the key disappearing; deleting it is the same, at once.
                let server = &server;
                let redis_key = redis_key.clone();
                async move {
                    let _: i64 = server.cmd(redis::cmd("DEL").arg(redis_key)).await;
                }
            }));
            result.map_err(TestCaseError::fail)
        })
        .unwrap();
}

// ---------------------------------------------------------------- claim workloads

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobAction {
    Ack,
    /// Extends the job's lease (its claim's, for the claim's other jobs too), then acks.
    Extend,
    Retry,
    /// The claimer dies holding the job: no ack, the lease must run out.
    Crash,
}

/// An entry another client wrote into the queue, mixed among the good jobs.
#[derive(Debug, Clone)]
enum Hostile {
    /// A job id without bytes.
    NoEnvelope,
    /// Bytes that do not decode.
    Garbage(Vec<u8>),
    /// Bytes over the queue's payload limit.
    Oversized,
    /// A valid envelope of another job.
    Stolen,
    /// An id no job can have (Redis only: the in-memory store cannot hold one).
    BadId(Vec<u8>),
}

fn hostile(bad_ids: bool) -> impl Strategy<Value = Hostile> {
    let bad_id = prop_oneof![
        Just(Vec::new()),
        Just(b"with space".to_vec()),
        Just(vec![b'x'; 129]),
        proptest::collection::vec(any::<u8>(), 1..40),
    ]
    .prop_filter("not a valid job id", |id| {
        std::str::from_utf8(id).map_or(true, |id| JobId::new(id).is_err())
    });
    let bad_id_weight = if bad_ids { 2 } else { 0 };
    prop_oneof![
        1 => Just(Hostile::NoEnvelope),
        1 => proptest::collection::vec(any::<u8>(), 1..64).prop_map(Hostile::Garbage),
        1 => Just(Hostile::Oversized),
        1 => Just(Hostile::Stolen),
        bad_id_weight => bad_id.prop_map(Hostile::BadId),
    ]
}

/// Where to write entries that only a raw client can: a Redis server's URL and key prefix.
#[derive(Debug, Clone)]
struct RawWriter {
    url: String,
    prefix: String,
}

impl RawWriter {
    async fn write(&self, queue: &str, id: &[u8], bytes: &[u8]) -> Result<(), String> {
        let client = redis::Client::open(self.url.as_str()).map_err(|e| e.to_string())?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        let key = |set: &str| format!("{}:q:{{{queue}}}:{set}", self.prefix);
        redis::pipe()
            .hset(key("jobs"), id, bytes)
            .zadd(key("delayed"), id, 0)
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| e.to_string())
    }
}

#[derive(Debug, Clone)]
struct Workload {
    due_offsets_ms: Vec<u64>,
    /// Entries another client wrote, claimed among the good jobs.
    hostile: Vec<Hostile>,
    claimers: usize,
    batch: usize,
    /// How many groups the jobs are pushed in (job n in group n mod groups, of weight
    /// 1 + n mod groups); 0: no groups, jobs in due order.
    groups: usize,
    /// The action for the n-th delivery of a job is `actions[(job + n) % len]`; the last
    /// delivery a job may get is always an ack, so every workload drains.
    actions: Vec<JobAction>,
}

fn workload(max_jobs: usize, bad_ids: bool) -> impl Strategy<Value = Workload> {
    let action = prop_oneof![5 => Just(JobAction::Ack), 1 => Just(JobAction::Extend), 3 => Just(JobAction::Retry), 1 => Just(JobAction::Crash)];
    (
        proptest::collection::vec(0u64..40, 1..=max_jobs),
        proptest::collection::vec(hostile(bad_ids), 0..8),
        1usize..=8,
        1usize..=32,
        0usize..=3,
        proptest::collection::vec(action, 1..12),
    )
        .prop_map(
            |(due_offsets_ms, hostile, claimers, batch, groups, actions)| Workload {
                due_offsets_ms,
                hostile,
                claimers,
                batch,
                groups,
                actions,
            },
        )
}

/// Deliveries after which a job is always acked, so that crashes and retries end.
const MAX_DELIVERIES: usize = 4;
const LEASE: Duration = Duration::from_millis(400);

#[derive(Default)]
struct Ledger {
    /// job -> when the live claimer holding it sent its claim.
    held: HashMap<JobId, Instant>,
    deliveries: HashMap<JobId, usize>,
    retries: HashMap<JobId, u32>,
    acked: HashSet<JobId>,
    violations: Vec<String>,
}

/// The payload limit of the workload's queue: `Hostile::Oversized` is over it.
const MAX_PAYLOAD: usize = 4096;

async fn check_workload<St: QueueStore>(
    store: St,
    raw: Option<RawWriter>,
    queue_name: String,
    load: Workload,
) -> Result<(), String> {
    let queue = DelayQueue::<u64, _>::new(store.clone(), queue_name.clone())
        .unwrap()
        .max_payload(MAX_PAYLOAD)
        .retry_policy(RetryPolicy {
            backoff: Backoff::exponential(Duration::ZERO, Duration::ZERO),
            max_attempts: u32::MAX,
            ..RetryPolicy::default()
        });
    let mut pushed = HashSet::new();
    for (n, offset) in load.due_offsets_ms.iter().enumerate() {
        let pusher = match load.groups {
            0 => queue.clone(),
            groups => queue.in_group(
                redefer::queue::JobGroup::new(format!("g{}", n % groups))
                    .unwrap()
                    .weight((n % groups) as u32 + 1)
                    .unwrap(),
            ),
        };
        let id = pusher
            .push(&(n as u64), Duration::from_millis(*offset))
            .await
            .map_err(|e| e.to_string())?
            .id;
        pushed.insert(id);
    }
    let name = redefer::queue::QueueName::new(queue_name.clone()).unwrap();
    let mut bad_ids = Vec::new();
    for (n, entry) in load.hostile.iter().enumerate() {
        let id = JobId::new(format!("hostile-{n}")).unwrap();
        let bytes = match entry {
            Hostile::NoEnvelope => Vec::new(),
            Hostile::Garbage(bytes) => bytes.clone(),
            Hostile::Oversized => vec![b'x'; MAX_PAYLOAD + 1],
            Hostile::Stolen => {
                br#"{"id":"someone-else","attempt":0,"enqueued_at_ms":0,"last_error":null,"payload":1}"#
                    .to_vec()
            }
            Hostile::BadId(bad) => {
                let raw = raw.as_ref().ok_or("a bad id needs a raw client")?;
                raw.write(&queue_name, bad, b"{}").await?;
                bad_ids.push(bad.clone());
                continue;
            }
        };
        store
            .push_many(&name, &[(id, bytes)], redefer::queue::Due::In(Duration::ZERO))
            .await
            .map_err(|e| e.to_string())?;
    }
    // Distinct bad ids: two generated ones may be equal, and are then one entry.
    let hostile_entries = (load.hostile.len() - bad_ids.len()) + bad_ids.iter().collect::<HashSet<_>>().len();
    let total = pushed.len();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let claimers: Vec<_> = (0..load.claimers)
        .map(|_| {
            let (queue, ledger, load) = (queue.clone(), ledger.clone(), load.clone());
            tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                while ledger.lock().unwrap().acked.len() < total {
                    if Instant::now() > deadline {
                        return Err("the workload did not drain within 60 s".to_string());
                    }
                    let sent = Instant::now();
                    let claimed = queue.claim(load.batch, LEASE).await.map_err(|e| e.to_string())?;
                    if claimed.jobs.is_empty() {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                    let replied = Instant::now();
                    for job in claimed.jobs {
                        let id = job.envelope.id.clone();
                        let action = {
                            let mut ledger = ledger.lock().unwrap();
                            if let Some(&previous) = ledger.held.get(&id)
                                && replied < previous + LEASE
                            {
                                let gap = replied - previous;
                                ledger
                                    .violations
                                    .push(format!("{id} handed out again {gap:?} after its claim"));
                            }
                            ledger.held.insert(id.clone(), sent);
                            let delivery = ledger.deliveries.entry(id.clone()).or_default();
                            *delivery += 1;
                            let n = *delivery;
                            let retries = ledger.retries.get(&id).copied().unwrap_or(0);
                            if job.envelope.attempt != retries {
                                ledger.violations.push(format!(
                                    "{id} at attempt {} after {retries} retries",
                                    job.envelope.attempt
                                ));
                            }
                            if n >= MAX_DELIVERIES {
                                JobAction::Ack
                            } else {
                                load.actions[(job.envelope.payload as usize + n) % load.actions.len()]
                            }
                        };
                        if action == JobAction::Extend {
                            let extended = queue
                                .extend_lease(&job.lease, LEASE)
                                .await
                                .map_err(|e| e.to_string())?;
                            if !extended && Instant::now() < sent + LEASE {
                                ledger
                                    .lock()
                                    .unwrap()
                                    .violations
                                    .push(format!("{id}: its lease not extended while it ran"));
                            }
                        }
                        match action {
                            JobAction::Ack | JobAction::Extend => {
                                ledger.lock().unwrap().held.remove(&id);
                                if queue.ack(&job.lease).await.map_err(|e| e.to_string())? {
                                    ledger.lock().unwrap().acked.insert(id);
                                }
                            }
                            JobAction::Retry => {
                                // Counted before the store has it: the next claimer may receive
                                // the job before `fail` returns here.
                                {
                                    let mut ledger = ledger.lock().unwrap();
                                    ledger.held.remove(&id);
                                    *ledger.retries.entry(id.clone()).or_default() += 1;
                                }
                                let after =
                                    queue.fail(&job.lease, "retry").await.map_err(|e| e.to_string())?;
                                if !matches!(after, redefer::queue::AfterFailure::Retrying { .. }) {
                                    ledger
                                        .lock()
                                        .unwrap()
                                        .violations
                                        .push(format!("{id}: {after:?} under a live lease"));
                                }
                            }
                            // The claimer forgets the job; `held` keeps its claim time, so an
                            // early redelivery is still caught.
                            JobAction::Crash => {}
                        }
                    }
                }
                Ok(())
            })
        })
        .collect();
    for claimer in claimers {
        claimer.await.map_err(|e| e.to_string())??;
    }
    {
        let ledger = ledger.lock().unwrap();
        if !ledger.violations.is_empty() {
            return Err(ledger.violations.join("; "));
        }
        if ledger.acked != pushed {
            return Err(format!("{} of {total} jobs acked", ledger.acked.len()));
        }
    }
    // Every hostile entry is buried with a reason; nothing else is left.
    let stats = queue.operator().stats().await.map_err(|e| e.to_string())?;
    let expected = QueueStats {
        dead: hostile_entries as u64,
        ..QueueStats::default()
    };
    if stats != expected {
        return Err(format!("after the drain: {stats:?}, expected {expected:?}"));
    }
    let dead = queue
        .operator()
        .list(redefer::queue::JobSet::Dead, 1000)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(silent) = dead
        .iter()
        .find(|entry| entry.reason.as_deref().is_none_or(str::is_empty))
    {
        return Err(format!("{:?} buried without a reason", silent.id));
    }
    Ok(())
}

fn run_workloads<St: QueueStore>(
    store: St,
    raw: Option<RawWriter>,
    runtime: &tokio::runtime::Runtime,
    default_cases: u32,
    max_jobs: usize,
) {
    let mut runner = TestRunner::new(ProptestConfig::with_cases(cases(default_cases)));
    runner
        .run(&workload(max_jobs, raw.is_some()), |load| {
            let name = format!("workload-{}", rand::random::<u64>());
            runtime
                .block_on(check_workload(store.clone(), raw.clone(), name, load))
                .map_err(TestCaseError::fail)
        })
        .unwrap();
}

#[test]
fn claim_workloads_deliver_each_job_to_one_live_claimer_in_memory() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    run_workloads(MemoryStore::new(), None, &runtime, 24, 2000);
}

#[test]
fn claim_workloads_deliver_each_job_to_one_live_claimer_on_redis() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime.block_on(server.store());
    let raw = RawWriter {
        url: server.url(),
        prefix: store.prefix().as_str().to_string(),
    };
    run_workloads(store, Some(raw), &runtime, 8, 2000);
}
