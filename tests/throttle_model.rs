//! The throttle's scripts checked against its model (`redefer::throttle::model`): generated
//! sequences of admissions (with a booking or not), bookings, closings and reopenings by callers
//! and jobs on two keys at three rates, with the clock moving on between them (from nothing to past a
//! booking's retention, and to a key's next slot to the microsecond), run one by one on the model and on a real Redis 7 and Valkey 9.
//! After every operation the replies agree to the microsecond, and so does each key's state:
//! its two times and its bookings (a job's sent back to wait for its start, marked).
//!
//! Time: the scripts read the server's clock (`TIME`), which a test cannot move. The test
//! runs the scripts' own text (`src/store/redis/lua/throttle*.lua`, assembled as the store
//! assembles it) with that one line steered: the clock comes from the call's last argument,
//! the model's clock. The schedule's key and the closing's are kept without their expiries,
//! which would run on the server's real clock (a schedule that ran out decides as an absent
//! one; a closing is read against the clock it names). Everything else is the scripts as
//! shipped.
//!
//! `PROPTEST_CASES` raises the number of sequences per server (the default fits CI).

use crate::differential;
use crate::support;

use std::time::Duration;

use differential::{Sequence, fail};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use redefer::LockKey;
use redefer::guard::Waiter;
use redefer::lock::LockToken;
use redefer::queue::{JobId, QueueName};
use redefer::throttle::model::{MAX_REOPENED_WAITERS, ThrottleModel};
use redefer::throttle::{Admission, BOOKING_RETENTION, Rate};
use redis::aio::ConnectionManager;

use support::{RedisServer, Server};

const PRELUDE: &str = include_str!("../src/store/redis/lua/throttle_prelude.lua");
const THROTTLE: &str = include_str!("../src/store/redis/lua/throttle.lua");
const CLOSE: &str = include_str!("../src/store/redis/lua/throttle_close.lua");
const REOPEN: &str = include_str!("../src/store/redis/lua/throttle_reopen.lua");
/// The line of the prelude that reads the server's clock, and what the test puts instead.
const SERVER_CLOCK: &str =
    "local time = redis.call('TIME')\nlocal now = tonumber(time[1]) * 1000000 + tonumber(time[2])";
const STEERED_CLOCK: &str = "local now = tonumber(ARGV[#ARGV])";

const KEYS: [&str; 2] = ["t0", "t1"];
/// Two callers waiting in place and two jobs: only jobs are sent back to wait for their start.
const WAITERS: usize = 4;

fn rates() -> [Rate; 3] {
    let rate = |rate: Result<Rate, _>| rate.expect("a valid rate");
    [
        rate(Rate::per_second(2)),
        rate(Rate::per_second(10).and_then(|rate| rate.burst(3))),
        rate(Rate::new(1, Duration::from_secs(5))),
    ]
}

/// What gives a schedule's key its expiry in real time, what gives a closing's, and what the
/// test writes instead.
const EXPIRY: &str = ", 'PX', forget)";
const CLOSING_EXPIRY: &str = ", 'PX', closed_ms)";
const NO_EXPIRY: &str = ")";

/// A throttle script as the store assembles it (its flags line, the prelude, its body), with
/// the clock steered, and the keys it writes kept without the `expiries`: they run on the
/// server's real clock, not the steered one (a schedule that ran out decides as an absent one,
/// a closing is read against the time it names, so keeping them changes no decision; dropping
/// them early, in real time, would).
fn steered(script: &str, expiries: &[&str]) -> redis::Script {
    let (flags, body) = script.split_once('\n').expect("a flags line");
    assert!(
        PRELUDE.contains(SERVER_CLOCK),
        "the prelude reads the clock as the test expects"
    );
    let mut script = PRELUDE.replace(SERVER_CLOCK, STEERED_CLOCK) + body;
    for expiry in expiries {
        assert!(
            script.contains(expiry),
            "the script sets {expiry} as the test expects"
        );
        script = script.replace(expiry, NO_EXPIRY);
    }
    redis::Script::new(&format!("{flags}\n{script}"))
}

#[derive(Debug, Clone)]
enum Op {
    Admit {
        key: usize,
        rate: usize,
        booked_as: Option<usize>,
    },
    Book {
        key: usize,
        rate: usize,
        waiter: usize,
    },
    Close {
        key: usize,
        rate: usize,
        ms: u64,
    },
    Reopen {
        key: usize,
    },
    /// The clock moves on, µs.
    Tick(u64),
    /// The clock moves to the key's next slot, a microsecond before, at or after it (where
    /// decisions turn).
    TickToSlot(usize, i8),
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    let rate = 0..3usize;
    let tick = prop_oneof![
        3 => 0u64..1_000,
        4 => 1_000u64..2_000_000,
        1 => 2_000_000u64..10_000_000,
        1 => Just(BOOKING_RETENTION.as_micros() as u64 + 1_000),
    ];
    prop_oneof![
        5 => (key.clone(), rate.clone(), proptest::option::of(0..WAITERS))
            .prop_map(|(key, rate, booked_as)| Op::Admit { key, rate, booked_as }),
        3 => (key.clone(), rate.clone(), 0..WAITERS).prop_map(|(key, rate, waiter)| Op::Book { key, rate, waiter }),
        // Shorter than a job waits in its run, or longer (the jobs that come are sent back).
        2 => (key.clone(), rate, prop_oneof![1u64..1_000, 1_000u64..30_000])
            .prop_map(|(key, rate, ms)| Op::Close { key, rate, ms }),
        3 => key.prop_map(|key| Op::Reopen { key }),
        3 => tick.prop_map(Op::Tick),
        2 => (0..KEYS.len(), -1i8..=1).prop_map(|(key, offset)| Op::TickToSlot(key, offset)),
    ]
}

/// A reply as both sides give it: an admission, a booked slot, how long until a closed key
/// opens (µs), how long until a reopened key's next slot (µs; none: it was not closed).
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Admission(Admission),
    Booked(u64),
    OpensIn(u64),
    Reopened(Option<u64>),
    Ticked,
}

/// What a key shows: its times, and its bookings (waiter, slot or start, sent back).
type Shows = (Option<(u64, u64)>, Vec<(String, u64, bool)>);

struct Run {
    model: ThrottleModel,
    redis: ConnectionManager,
    prefix: String,
    waiters: Vec<Waiter>,
    now: u64,
    throttle: redis::Script,
    close: redis::Script,
    reopen: redis::Script,
}

impl Sequence for Run {
    type Op = Op;
    const REGRESSIONS: &str = "tests/throttle_model.proptest-regressions";

    /// A reopening changes what it finds only after a booking, a closing longer than a job
    /// waits in its run and the job's coming, in that order, on one key: four times the
    /// default, so that a one-line change there is seen in every run (at 96, in three of four).
    const CASES: u32 = 384;

    async fn start(server: &RedisServer) -> Self {
        let client = redis::Client::open(server.url()).expect("a valid URL");
        let redis = ConnectionManager::new(client)
            .await
            .expect("connect to the test server");
        let queue = QueueName::new("model").expect("a valid queue name");
        let job = |id: &str| Waiter::job(&queue, &JobId::new(id).expect("a valid id"));
        Run {
            model: ThrottleModel::new(),
            redis,
            prefix: support::unique_prefix(),
            waiters: vec![
                Waiter::caller(LockToken::random()),
                Waiter::caller(LockToken::random()),
                job("job-2"),
                job("job-3"),
            ],
            now: 1_800_000_000_000_000,
            throttle: steered(THROTTLE, &[EXPIRY]),
            close: steered(CLOSE, &[EXPIRY, CLOSING_EXPIRY]),
            // Its schedule has no expiry here (kept without one by the others): none is set.
            reopen: steered(REOPEN, &[]),
        }
    }

    async fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let rates = rates();
        let (model, redis) = match *op {
            Op::Admit { key, rate, booked_as } => {
                let k = LockKey::new(KEYS[key]).map_err(fail)?;
                let waiter = booked_as.map(|waiter| self.waiters[waiter].clone());
                let model = self.model.admit(&k, rates[rate], waiter.as_ref(), self.now);
                let redis = match self.decide(key, rates[rate], false, booked_as).await? {
                    (1, _, _) => Admission::Admitted,
                    (2, wait, _) => Admission::Redeemed {
                        wait: Duration::from_micros(wait),
                    },
                    (0, wait, _) => Admission::Throttled {
                        opens_in: Duration::from_micros(wait),
                    },
                    other => return Err(fail(format!("the script answered {other:?}"))),
                };
                (Reply::Admission(model), Reply::Admission(redis))
            }
            Op::Book { key, rate, waiter } => {
                let k = LockKey::new(KEYS[key]).map_err(fail)?;
                let model = self
                    .model
                    .book(&k, rates[rate], &self.waiters[waiter].clone(), self.now);
                let (status, _, slot) = self.decide(key, rates[rate], true, Some(waiter)).await?;
                prop_assert_eq!(status, 3, "a booking is answered as one");
                (Reply::Booked(model), Reply::Booked(slot))
            }
            Op::Close { key, rate, ms } => {
                let k = LockKey::new(KEYS[key]).map_err(fail)?;
                let duration = Duration::from_millis(ms);
                let model = self.model.close(&k, rates[rate], duration, self.now);
                let redis: u64 = self
                    .close
                    .key(self.redis_key("throttle", key))
                    .key(self.redis_key("throttle-closed", key))
                    .arg(rates[rate].interval().as_micros() as u64)
                    .arg(rates[rate].tolerance().as_micros() as u64)
                    .arg(duration.as_micros() as u64)
                    .arg(self.now)
                    .invoke_async(&mut self.redis)
                    .await
                    .map_err(fail)?;
                (Reply::OpensIn(model), Reply::OpensIn(redis))
            }
            Op::Reopen { key } => {
                let k = LockKey::new(KEYS[key]).map_err(fail)?;
                let model = self.model.reopen(&k, self.now);
                let redis: i64 = self
                    .reopen
                    .key(self.redis_key("throttle", key))
                    .key(self.redis_key("throttle-closed", key))
                    .key(self.redis_key("throttle-bookings", key))
                    .arg(MAX_REOPENED_WAITERS)
                    .arg(self.now)
                    .invoke_async(&mut self.redis)
                    .await
                    .map_err(fail)?;
                (Reply::Reopened(model), Reply::Reopened(u64::try_from(redis).ok()))
            }
            Op::Tick(micros) => {
                self.now += micros;
                (Reply::Ticked, Reply::Ticked)
            }
            Op::TickToSlot(key, offset) => {
                let k = LockKey::new(KEYS[key]).map_err(fail)?;
                if let Some((free_at, run_free_at)) = self.model.times(&k) {
                    let slot = free_at.max(run_free_at).saturating_add_signed(offset.into());
                    self.now = self.now.max(slot);
                }
                (Reply::Ticked, Reply::Ticked)
            }
        };
        prop_assert_eq!(model, redis, "the replies to {:?}", op);
        for (key, name) in KEYS.iter().enumerate() {
            let (model, redis) = (self.model_shows(key)?, self.redis_shows(key).await?);
            prop_assert_eq!(model, redis, "what {} shows after {:?}", name, op);
        }
        Ok(())
    }
}

impl Run {
    fn redis_key(&self, kind: &str, key: usize) -> String {
        format!("{}:{kind}:{{{}}}", self.prefix, KEYS[key])
    }

    async fn decide(
        &mut self,
        key: usize,
        rate: Rate,
        book: bool,
        waiter: Option<usize>,
    ) -> Result<(i64, u64, u64), TestCaseError> {
        let waiter = waiter.map_or("", |waiter| self.waiters[waiter].as_str());
        self.throttle
            .key(self.redis_key("throttle", key))
            .key(self.redis_key("throttle-bookings", key))
            .arg(rate.interval().as_micros() as u64)
            .arg(rate.tolerance().as_micros() as u64)
            .arg(if book { "1" } else { "0" })
            .arg(waiter)
            .arg(BOOKING_RETENTION.as_millis() as u64)
            .arg(self.now)
            .invoke_async(&mut self.redis)
            .await
            .map_err(fail)
    }

    fn model_shows(&self, key: usize) -> Result<Shows, TestCaseError> {
        let k = LockKey::new(KEYS[key]).map_err(fail)?;
        let bookings = self.model.bookings(&k);
        let bookings = bookings
            .into_iter()
            .map(|(waiter, slot, sent_back)| (waiter.as_str().to_string(), slot, sent_back))
            .collect();
        Ok((self.model.times(&k), bookings))
    }

    async fn redis_shows(&mut self, key: usize) -> Result<Shows, TestCaseError> {
        let state: Option<String> = redis::cmd("GET")
            .arg(self.redis_key("throttle", key))
            .query_async(&mut self.redis)
            .await
            .map_err(fail)?;
        let times = state.map(|state| {
            let times: Vec<u64> = state
                .split(' ')
                .map(|time| time.parse().unwrap_or(u64::MAX))
                .collect();
            (times[0], *times.last().unwrap_or(&times[0]))
        });
        let booked: Vec<(String, u64)> = redis::cmd("ZRANGE")
            .arg(self.redis_key("throttle-bookings", key))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut self.redis)
            .await
            .map_err(fail)?;
        let mut bookings: Vec<(String, u64, bool)> = booked
            .into_iter()
            .map(|(member, slot)| match member.strip_prefix('>') {
                Some(waiter) => (waiter.to_string(), slot, true),
                None => (member, slot, false),
            })
            .collect();
        bookings.sort_unstable_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        Ok((times, bookings))
    }
}

#[test]
fn redis_throttle_scripts_agree_with_the_model() {
    differential::agree::<Run>(Server::Redis, op());
}

#[test]
fn valkey_throttle_scripts_agree_with_the_model() {
    differential::agree::<Run>(Server::Valkey, op());
}
