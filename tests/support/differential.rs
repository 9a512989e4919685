//! What the differential tests of the scripts against their models share (a module of the
//! test binaries that use it, beside `support`): replies made comparable, fencing tokens
//! checked on each side, and the runner of generated sequences on one server.
#![allow(dead_code)] // each test binary uses a different part of it

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence, TestCaseError, TestRunner};
use redefer::RedisStore;
use redefer::guard::{LineJoin, Waiter};
use redefer::lock::Acquisition;
use redefer::queue::{DelayQueue, Due, JobId};
use redis::aio::ConnectionManager;

use crate::support::{RedisServer, Server};

/// How much less than the model Redis may report as a TTL's rest: the time a sequence takes
/// (the model's clock stands still).
pub const TIME_TOLERANCE: Duration = Duration::from_secs(1);

/// A reply with the TTLs' rest rounded to the tolerance (Redis's is at most the model's, and
/// less by the time the sequence took) and fencing tokens left out (compared apart).
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Acquired,
    Held {
        remaining: Option<u64>,
        ahead: u64,
        typical_hold: Option<Duration>,
        reserved: bool,
    },
    /// The keys of a set that were not free: index, rest, waiters ahead, typical hold, and
    /// whether each is reserved.
    SetHeld(Vec<HeldKeyReply>),
    Done(bool),
    Joined {
        ahead: u64,
        evicted: Vec<String>,
    },
    Full {
        waiting: u64,
    },
}

/// A key of a set that was not free, in [`Reply::SetHeld`].
pub type HeldKeyReply = (usize, Option<u64>, u64, Option<Duration>, bool);

/// The rest of a TTL in whole tolerances, rounded up: the model's 60 s and Redis's 59.9 s are
/// both 60.
pub fn rounded(remaining: Option<Duration>) -> Option<u64> {
    remaining.map(|rest| rest.as_millis().div_ceil(TIME_TOLERANCE.as_millis()) as u64)
}

/// An acquisition as a comparable reply, and its fencing token.
pub fn acquisition_reply(acquisition: Acquisition) -> (Reply, Option<u64>) {
    match acquisition {
        Acquisition::Acquired(fence) => (Reply::Acquired, fence.map(|fence| fence.0)),
        Acquisition::Held {
            remaining,
            ahead,
            typical_hold,
            reserved,
        } => (
            Reply::Held {
                remaining: rounded(remaining),
                ahead,
                typical_hold,
                reserved,
            },
            None,
        ),
    }
}

/// A join as a comparable reply: the waiters evicted, as text.
pub fn joined_reply(joined: Result<(u64, Vec<Waiter>), u64>) -> Reply {
    match joined {
        Ok((ahead, evicted)) => Reply::Joined {
            ahead,
            evicted: evicted.iter().map(|waiter| waiter.as_str().to_string()).collect(),
        },
        Err(waiting) => Reply::Full { waiting },
    }
}

/// A store's [`LineJoin`] as the model's join answers it.
pub fn line_join(joined: LineJoin) -> Result<(u64, Vec<Waiter>), u64> {
    match joined {
        LineJoin::Joined { ahead, evicted } => Ok((ahead, evicted)),
        LineJoin::Full { waiting } => Err(waiting),
    }
}

/// Each key's highest fencing token on each side (0: the model, 1: Redis), and each holder's
/// last.
#[derive(Default)]
pub struct Fences(HashMap<(usize, usize), (u64, HashMap<usize, u64>)>);

impl Fences {
    /// A new token of `key` for `holder` on `side`: above every token of the key so far, or the
    /// holder's own again (a re-sent acquire finds its holding).
    pub fn check(&mut self, key: usize, holder: usize, side: usize, fence: u64) -> Result<(), TestCaseError> {
        let (highest, own) = self.0.entry((key, side)).or_default();
        let rises = fence > *highest || own.get(&holder) == Some(&fence);
        prop_assert!(
            rises,
            "key {} side {}: token {} for holder {} after {} (its own: {:?})",
            key,
            side,
            fence,
            holder,
            highest,
            own.get(&holder)
        );
        *highest = (*highest).max(fence);
        own.insert(holder, fence);
        Ok(())
    }
}

pub fn fail(error: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(error.to_string())
}

/// A store on a fresh prefix of `server`, handoffs reserved for `reservation`, with the job
/// `job` of the queue `model` stored (a deferred waiter's: a handoff makes it due); and a
/// connection to read the server's keys. The prefix, the store, the connection.
pub async fn store_with_a_job(
    server: &RedisServer,
    reservation: Duration,
    job: &JobId,
) -> (String, RedisStore, ConnectionManager) {
    let prefix = crate::support::unique_prefix();
    let store = crate::support::store_at(&server.url(), &prefix)
        .await
        .with_reservation(reservation);
    let queue = DelayQueue::<u64, _>::new(store.clone(), "model").expect("a valid queue name");
    queue
        .push_with_id(job.clone(), &0, Due::In(reservation))
        .await
        .expect("the job is stored");
    let client = redis::Client::open(server.url()).expect("a valid URL");
    let redis = ConnectionManager::new(client)
        .await
        .expect("connect to the test server");
    (prefix, store, redis)
}

/// One generated sequence of operations, run on a model and on a server side by side.
pub trait Sequence: Sized {
    type Op: std::fmt::Debug + Clone;

    /// How many sequences run unless `PROPTEST_CASES` says: more where a change is only seen
    /// after a rarer run of operations.
    const CASES: u32 = 96;

    /// Where the seeds of the sequences that failed are kept, from the package's folder (the
    /// test's own `tests/<name>.proptest-regressions`): proptest writes a failing sequence's
    /// seed there and runs every seed in it first, before any new sequence, in every later run.
    const REGRESSIONS: &'static str;

    /// A fresh model, and a fresh prefix on `server`.
    async fn start(server: &RedisServer) -> Self;

    /// Runs `op` on both, checking that they agree.
    async fn step(&mut self, op: &Self::Op) -> Result<(), TestCaseError>;
}

/// Runs one sequence, `ops`, as `S` on a server of kind `server`: a sequence the generated
/// ones once found, kept. Skipped where the server is not installed.
pub fn replay<S: Sequence>(server: Server, ops: &[S::Op]) {
    if !server.available() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let redis = RedisServer::start_of(server);
    runtime.block_on(async {
        let mut sequence = S::start(&redis).await;
        for op in ops {
            if let Err(error) = sequence.step(op).await {
                panic!("{server:?}: {error} at {op:?} of {ops:#?}");
            }
        }
    });
}

/// Runs generated sequences of `op` as `S` on a server of kind `server`: `PROPTEST_CASES` of
/// them, else [`S::CASES`](Sequence::CASES). Skipped where the server is not installed (see [`Server::available`]).
pub fn agree<S: Sequence>(server: Server, op: impl Strategy<Value = S::Op>) {
    if !server.available() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let redis = RedisServer::start_of(server);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(S::CASES);
    let mut runner = TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(S::REGRESSIONS))),
        ..ProptestConfig::default()
    });
    let sequences = proptest::collection::vec(op, 1..40);
    let outcome = runner.run(&sequences, |ops| {
        runtime.block_on(async {
            let mut sequence = S::start(&redis).await;
            for op in &ops {
                sequence.step(op).await?;
            }
            Ok(())
        })
    });
    if let Err(error) = outcome {
        // The newest seed proptest kept (a new failure's, or the kept one that failed again): a
        // failure found by a run whose folder is thrown away (CI's clone) is kept by adding
        // this line to the file in the repository.
        let kept = std::fs::read_to_string(S::REGRESSIONS).ok();
        let seed = kept
            .as_deref()
            .and_then(|kept| kept.lines().rev().find(|line| line.starts_with("cc ")))
            .unwrap_or("(none written)");
        panic!(
            "{server:?}: {error}\nthe seeds of failing sequences are kept in {} and run first by every later run; the newest: {seed}",
            S::REGRESSIONS
        );
    }
}
