//! The permit scripts (semaphore and read-write lock) checked against the permits' model
//! (`redefer::semaphore::model`): generated sequences of operations by four callers on two
//! keys, three reading and one writing, each call with a limit of one to three, with expiries (a holder that
//! crashed, a waiter handed a permit that never came), run one by one on the model and on a
//! real Redis 7 and Valkey 9 through the Redis store. After every operation the replies agree,
//! and so does what each key shows: its holders (and which writes; on Redis, the entries of the
//! permits' set and the key's first permit, a key of its own), the waiters its permits are
//! reserved for, and its line (and which wait to write), in order. Fencing tokens rise on both
//! with each new permit.
//!
//! Time: the model's clock stands still, TTLs and reservations last a minute (what Redis
//! reports as remaining may be less by the time a sequence takes: `differential::TIME_TOLERANCE`).
//! An expiry sets the permit's (or the reservation's) deadline in the past: on Redis its score
//! (a first permit's key is deleted, as its TTL would), on the model
//! [`PermitModel::expire_permit`] and [`PermitModel::expire_reservation`].
//!
//! `PROPTEST_CASES` raises the number of sequences per server (the default fits CI).

use crate::differential;
use crate::support;

use std::time::Duration;

use differential::{Fences, Reply, Sequence, acquisition_reply, fail, joined_reply, line_join};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use redefer::guard::{LineCap, Waiter};
use redefer::lock::model::Now;
use redefer::lock::{Fencing, Holders, LockStore, LockToken};
use redefer::queue::{JobId, QueueName};
use redefer::semaphore::model::PermitModel;
use redefer::{LockKey, RedisStore};
use redis::aio::ConnectionManager;

use support::{RedisServer, Server};

const TTL: Duration = Duration::from_secs(60);
const KEYS: [&str; 2] = ["p0", "p1"];
const CALLERS: usize = 4;
/// The caller that writes (a read-write lock's writer); the others read.
const WRITER: usize = 2;

/// How a caller holds: with a limit of 1 to 3, reading (a permit) or writing (the key alone).
#[derive(Debug, Clone, Copy)]
struct As {
    limit: u32,
    writes: bool,
}

impl As {
    fn holders(self) -> Holders {
        if self.writes {
            Holders::Writer(self.limit)
        } else {
            Holders::Permits(self.limit)
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        caller: usize,
        key: usize,
        by: As,
        in_line: bool,
    },
    Extend {
        caller: usize,
        key: usize,
        by: As,
    },
    Release {
        caller: usize,
        key: usize,
        by: As,
        held_ms: Option<u64>,
    },
    /// Joins the key's line, capped at two waiters (dropping jobs first) or not.
    Join {
        caller: usize,
        key: usize,
        by: As,
        capped: bool,
    },
    Leave {
        caller: usize,
        key: usize,
        by: As,
    },
    /// The caller's permit of the key runs out (it crashed).
    ExpirePermit {
        caller: usize,
        key: usize,
    },
    /// The permit reserved for the caller runs out (it never came).
    ExpireReservation {
        caller: usize,
        key: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let caller = 0..CALLERS;
    let key = 0..KEYS.len();
    let by = (1u32..=3).prop_map(|limit| As { limit, writes: false });
    prop_oneof![
        5 => (caller.clone(), key.clone(), by.clone(), any::<bool>())
            .prop_map(|(caller, key, by, in_line)| Op::Acquire { caller, key, by, in_line }),
        1 => (caller.clone(), key.clone(), by.clone()).prop_map(|(caller, key, by)| Op::Extend { caller, key, by }),
        3 => (caller.clone(), key.clone(), by.clone(), proptest::option::of(0u64..500))
            .prop_map(|(caller, key, by, held_ms)| Op::Release { caller, key, by, held_ms }),
        3 => (caller.clone(), key.clone(), by.clone(), any::<bool>())
            .prop_map(|(caller, key, by, capped)| Op::Join { caller, key, by, capped }),
        1 => (caller.clone(), key.clone(), by).prop_map(|(caller, key, by)| Op::Leave { caller, key, by }),
        1 => (caller.clone(), key.clone()).prop_map(|(caller, key)| Op::ExpirePermit { caller, key }),
        1 => (caller, key).prop_map(|(caller, key)| Op::ExpireReservation { caller, key }),
    ]
}

/// What a key shows, the same way for both: its holders (caller, writes), the callers its
/// permits are reserved for, and its line (waiter, writes).
type Shows = (Vec<(usize, bool)>, Vec<String>, Vec<(String, bool)>);

/// One sequence, run on the model and on a fresh prefix of the server.
struct Run {
    model: PermitModel,
    store: RedisStore,
    redis: ConnectionManager,
    prefix: String,
    tokens: [LockToken; CALLERS],
    /// Each caller's waiter: the last one a deferred job, which a full line may evict.
    waiters: [Waiter; CALLERS],
    keys: Vec<LockKey>,
    fences: Fences,
}

impl Sequence for Run {
    type Op = Op;
    const REGRESSIONS: &str = "tests/permit_model.proptest-regressions";

    async fn start(server: &RedisServer) -> Self {
        // The job that the last caller's waiter stands for exists: a handoff makes it due.
        let job = JobId::new("job-3").expect("a valid id");
        let (prefix, store, redis) = differential::store_with_a_job(server, TTL, &job).await;
        let tokens = [(); CALLERS].map(|_| LockToken::random());
        let job_queue = QueueName::new("model").expect("a valid queue name");
        let waiters = [
            Waiter::caller(tokens[0]),
            Waiter::caller(tokens[1]),
            Waiter::caller(tokens[2]),
            Waiter::job(&job_queue, &job),
        ];
        Run {
            model: PermitModel::new(TTL),
            store,
            redis,
            prefix,
            tokens,
            waiters,
            keys: KEYS
                .iter()
                .map(|name| LockKey::new(*name).expect("a valid key"))
                .collect(),
            fences: Fences::default(),
        }
    }

    async fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let op = &writing_as_its_caller(op.clone());
        let now = Now::at(Duration::ZERO);
        let (tokens, waiters) = (self.tokens, self.waiters.clone());
        let (model, redis) = match *op {
            Op::Acquire {
                caller,
                key,
                by,
                in_line,
            } => {
                let k = &self.keys[key];
                let waiter = in_line.then_some(&waiters[caller]);
                let acquired = self
                    .model
                    .acquire(k, tokens[caller], TTL, by.holders(), waiter, now);
                let (model, model_fence) = acquisition_reply(acquired.acquisition);
                let on_redis = self
                    .store
                    .acquire(k, tokens[caller], TTL, by.holders(), waiter, Fencing::On)
                    .await
                    .map_err(fail)?;
                let (redis, redis_fence) = acquisition_reply(on_redis);
                for (side, fence) in [model_fence, redis_fence].into_iter().enumerate() {
                    if let Some(fence) = fence {
                        self.fences.check(key, caller, side, fence)?;
                    }
                }
                (model, redis)
            }
            Op::Extend { caller, key, by } => {
                let k = &self.keys[key];
                let model = self.model.extend(k, tokens[caller], TTL, by.holders(), now);
                let redis = self
                    .store
                    .extend_holding(k, tokens[caller], TTL, by.holders())
                    .await
                    .map_err(fail)?;
                (Reply::Done(model), Reply::Done(redis))
            }
            Op::Release {
                caller,
                key,
                by,
                held_ms,
            } => {
                let k = &self.keys[key];
                let held = held_ms.map(Duration::from_millis);
                let (model, _) = self.model.release(k, tokens[caller], by.holders(), held, now);
                let redis = self
                    .store
                    .release_holding(k, tokens[caller], by.holders(), held)
                    .await
                    .map_err(fail)?;
                (Reply::Done(model), Reply::Done(redis))
            }
            Op::Join {
                caller,
                key,
                by,
                capped,
            } => {
                let (k, w) = (&self.keys[key], &waiters[caller]);
                let cap = capped.then(|| LineCap::new(2).drop_oldest());
                let model = joined_reply(self.model.join(k, w, None, by.holders(), cap, now).0);
                let redis = self
                    .store
                    .join_line(k, w, None, by.holders(), cap)
                    .await
                    .map_err(fail)?;
                (model, joined_reply(line_join(redis)))
            }
            Op::Leave { caller, key, by } => {
                let (k, w) = (&self.keys[key], &waiters[caller]);
                self.model.leave(k, w, by.holders(), now);
                self.store.leave_line(k, w, by.holders()).await.map_err(fail)?;
                (Reply::Done(true), Reply::Done(true))
            }
            Op::ExpirePermit { caller, key } => {
                self.model
                    .expire_permit(&self.keys[key], tokens[caller], Duration::ZERO);
                let hex = String::from_utf8_lossy(&tokens[caller].to_hex()).into_owned();
                let permits = self.redis_key("permits", key);
                for holder in [hex.clone(), format!("!{hex}")] {
                    let _: i64 = self
                        .redis(redis::cmd("ZADD").arg(&permits).arg("XX").arg(1).arg(&holder))
                        .await?;
                }
                // The first permit runs out with its key: gone, where an entry's deadline passed.
                let first = self.redis_key("permit-first", key);
                let value: Option<String> = self.redis(redis::cmd("GET").arg(&first)).await?;
                let holder = value
                    .as_deref()
                    .and_then(|value| value.split_once('|'))
                    .map(|(holder, _)| holder);
                if holder.is_some_and(|holder| holder.trim_start_matches('!') == hex) {
                    let _: i64 = self.redis(redis::cmd("DEL").arg(&first)).await?;
                }
                (Reply::Done(true), Reply::Done(true))
            }
            Op::ExpireReservation { caller, key } => {
                self.model
                    .expire_reservation(&self.keys[key], &waiters[caller], Duration::ZERO);
                let member = format!("@{}", waiters[caller].as_str());
                let permits = self.redis_key("permits", key);
                let _: i64 = self
                    .redis(redis::cmd("ZADD").arg(permits).arg("XX").arg(1).arg(member))
                    .await?;
                (Reply::Done(true), Reply::Done(true))
            }
        };
        prop_assert_eq!(model, redis, "the replies to {:?}", op);
        for (key, name) in KEYS.iter().enumerate() {
            let (model, redis) = (self.model_shows(key), self.redis_shows(key).await?);
            prop_assert_eq!(model, redis, "what {} shows after {:?}", name, op);
        }
        Ok(())
    }
}

impl Run {
    fn redis_key(&self, kind: &str, key: usize) -> String {
        format!("{}:{kind}:{{{}}}", self.prefix, KEYS[key])
    }

    async fn redis<T: redis::FromRedisValue>(&mut self, command: &redis::Cmd) -> Result<T, TestCaseError> {
        command.query_async(&mut self.redis).await.map_err(fail)
    }

    fn caller_of(&self, token: LockToken) -> usize {
        self.tokens.iter().position(|t| *t == token).unwrap_or(usize::MAX)
    }

    fn model_shows(&self, key: usize) -> Shows {
        let k = &self.keys[key];
        // An expired permit's deadline is the model's now, 0: what lives is after it.
        let mut holders: Vec<_> = self
            .model
            .holders(k, Duration::ZERO)
            .into_iter()
            .map(|(token, writes)| (self.caller_of(token), writes))
            .collect();
        holders.sort_unstable();
        let reserved = self.model.reserved(k, Duration::ZERO);
        let line = self.model.line(k);
        (
            holders,
            reserved
                .iter()
                .map(|waiter| waiter.as_str().to_string())
                .collect(),
            line.into_iter()
                .map(|(waiter, writes)| (waiter.as_str().to_string(), writes))
                .collect(),
        )
    }

    async fn redis_shows(&mut self, key: usize) -> Result<Shows, TestCaseError> {
        // Deadlines set in the past (1 ms after the epoch) are run out, not yet pruned.
        let mut live: Vec<String> = self
            .redis(
                redis::cmd("ZRANGE")
                    .arg(self.redis_key("permits", key))
                    .arg("(1")
                    .arg("+inf")
                    .arg("BYSCORE"),
            )
            .await?;
        // The key's first permit (`<holder>|<limit>`), held as a key of its own.
        let first: Option<String> = self
            .redis(redis::cmd("GET").arg(self.redis_key("permit-first", key)))
            .await?;
        live.extend(
            first
                .as_deref()
                .and_then(|first| first.split_once('|'))
                .map(|(holder, _)| holder.to_string()),
        );
        let line: Vec<String> = self
            .redis(
                redis::cmd("ZRANGE")
                    .arg(self.redis_key("permit-waiters", key))
                    .arg(0)
                    .arg(-1),
            )
            .await?;
        let writers: Vec<String> = self
            .redis(redis::cmd("SMEMBERS").arg(self.redis_key("permit-writers", key)))
            .await?;
        let mut holders = Vec::new();
        let mut reserved = Vec::new();
        for member in live {
            if let Some(waiter) = member.strip_prefix('@') {
                reserved.push(waiter.to_string());
                continue;
            }
            let (hex, writes) = match member.strip_prefix('!') {
                Some(hex) => (hex, true),
                None => (member.as_str(), false),
            };
            let caller = self
                .tokens
                .iter()
                .position(|token| token.to_hex() == hex.as_bytes());
            holders.push((caller.unwrap_or(usize::MAX), writes));
        }
        holders.sort_unstable();
        reserved.sort_unstable();
        let line = line
            .into_iter()
            .map(|waiter| {
                let writes = writers.contains(&waiter);
                (waiter, writes)
            })
            .collect();
        Ok((holders, reserved, line))
    }
}

/// The op with its caller's way of holding: the third caller writes, the others read (a
/// token holds one way; the layers never send one token both ways).
fn writing_as_its_caller(mut op: Op) -> Op {
    if let Op::Acquire { caller, by, .. }
    | Op::Extend { caller, by, .. }
    | Op::Release { caller, by, .. }
    | Op::Join { caller, by, .. }
    | Op::Leave { caller, by, .. } = &mut op
    {
        by.writes = *caller == WRITER;
    }
    op
}

#[test]
fn redis_permit_scripts_agree_with_the_model() {
    differential::agree::<Run>(Server::Redis, op());
}

#[test]
fn valkey_permit_scripts_agree_with_the_model() {
    differential::agree::<Run>(Server::Valkey, op());
}
