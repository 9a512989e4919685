//! Every interleaving of a few requests deferred onto one key's pending job (`Coalesce`,
//! `Debounce`) and a scheduler that runs the key's jobs, on the queue's model
//! (`redefer::queue::model`), explored breadth first (`support/explore.rs`). Each request
//! pushes as `DelayQueue::push_pending` does: under a fresh id, again under the pending job's
//! id when told to encode for it, again under a new fresh id when the job it aimed at moved
//! (claimed meanwhile). The scheduler claims one due job at a time, holds up to two, and acks
//! them in any order; the clock may jump past every lease (the scheduler was paused: its jobs
//! go back to wait, its acks are refused). In every reachable state:
//!
//! - no request is lost: each ends carried by a waiting job (stored, its payload replacing the
//!   job's, or dropped beside the job that keeps the first request), and a run of that job
//!   starts after it;
//! - a run carries the latest request it was given: with `Keep::Latest`, never a payload that
//!   arrived before one of the requests the job took in (a request that waited in place before
//!   deferring arrived that long before its push; requests that arrived in the same millisecond
//!   are in the order they ended); with `Keep::First`, the payload of the request that stored
//!   the job;
//! - the key has one waiting job at most, besides jobs back from a lease that ran out: a
//!   request deferred while one waits joins it;
//! - a request ends within the pushes `DelayQueue::push_pending` allows itself;
//!   (not a rule: that runs of successive jobs go by arrival. A request that waited in place
//!   and defers once the key's job was claimed starts a new job, which runs after the newer
//!   request's, as `Coalesce` says; in a stack it is ahead of later requests in the key's line,
//!   so it defers before they run unless it lost its place, say in a paused process);
//! - from every reachable state, a state where every request ended and every job ran can be
//!   reached.
//!
//! Each rule was seen to fail on a model broken in one line: a waiting job's request that
//! arrived later replaced by one that arrived before it (no `Newer`), the two keeps swapped, a
//! stored job not made the key's pending job (two wait), a request of another id taken as
//! joined without its envelope (ended on a job that does not wait), `Keep::First` replacing
//! the payload, a push under the id of a job in flight storing it anew (its run's ack
//! refused).

use crate::explore;

use std::time::Duration;

use explore::Protocol;
use redefer::LockKey;
use redefer::lock::LockToken;
use redefer::queue::model::QueueModel;
use redefer::queue::{
    ClaimLimits, Counters, Hold, JobId, JobSet, Keep, PendingJob, PendingPush, PendingRules,
};

/// The model's clock at the start: every job is due at once, and the clock moves only past
/// every lease.
const START: i64 = 1_800_000_000_000;
const LEASE: Duration = Duration::from_secs(30);
const LIMITS: ClaimLimits = ClaimLimits {
    max_envelope: 1024,
    max_expiries: 2,
};
/// How many pushes one request makes at most before `DelayQueue::push_pending` gives up
/// (`MAX_PENDING_TRIES` in `src/queue/pending.rs`).
const MAX_PUSHES: u8 = 16;
/// How many jobs the scheduler holds at once at most.
const HELD: usize = 2;

struct Config {
    name: &'static str,
    keep: Keep,
    requests: usize,
    /// Whether the first request waited in place before it deferred: it arrived before the
    /// others.
    first_waited: bool,
    /// How many times the clock may jump past every lease.
    pauses: u8,
    token: LockToken,
}

impl Config {
    fn new(name: &'static str, keep: Keep, requests: usize, first_waited: bool, pauses: u8) -> Config {
        Config {
            name,
            keep,
            requests,
            first_waited,
            pauses,
            token: LockToken::random(),
        }
    }

    /// How long before its push request `r` arrived.
    fn arrived_ago(&self, r: usize) -> Duration {
        if r == 0 && self.first_waited {
            Duration::from_secs(1)
        } else {
            Duration::ZERO
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Request {
    /// About to push under `id`, after `pushes` pushes.
    Pushing { id: JobId, pushes: u8 },
    /// Ended, carried by `job` (its own, or the pending job it joined or was dropped beside):
    /// `arrival` orders it among the requests (when it arrived, ms since the epoch: its last
    /// push's time less how long it waited in place; then the order the requests ended in),
    /// and `ran` says whether a run of `job` started since.
    Ended {
        job: JobId,
        arrival: (i64, u8),
        ran: bool,
    },
}

#[derive(Clone)]
struct State {
    model: QueueModel,
    requests: Vec<Request>,
    /// The jobs the scheduler claimed and has not acked yet, and when their lease ends.
    held: Vec<(JobId, Hold, i64)>,
    /// How many requests ended.
    ended: u8,
    now: i64,
    pauses: u8,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Push(usize),
    Claim,
    Ack(usize),
    /// The clock jumps past every lease.
    Pause,
}

fn key() -> LockKey {
    LockKey::new("account:7").expect("a valid key")
}

fn fresh_id(r: usize, pushes: u8) -> JobId {
    JobId::new(format!("r{r}-{pushes}")).expect("a valid id")
}

/// The request that stored job `id`: each job is stored under a fresh id of its first request.
fn storer(id: &JobId) -> Option<usize> {
    id.as_str().strip_prefix('r')?.split('-').next()?.parse().ok()
}

/// The request a job's payload is.
fn payload_of(envelope: &[u8]) -> usize {
    usize::from(envelope[0])
}

impl State {
    /// The order of request `r`'s arrival, once it ended.
    fn arrival(&self, r: usize) -> Option<(i64, u8)> {
        match &self.requests[r] {
            Request::Ended { arrival, .. } => Some(*arrival),
            Request::Pushing { .. } => None,
        }
    }

    fn drained(&self) -> bool {
        let stats = self.model.stats(self.now);
        stats.waiting == 0 && stats.in_flight == 0
    }
}

impl Protocol for Config {
    type State = State;
    type Step = Step;
    type Print = (
        Vec<Request>,
        Vec<JobId>,
        Vec<(JobId, Option<JobSet>, Option<Vec<u8>>)>,
        Option<(JobId, u64)>,
        u8,
        u8,
    );

    fn initial(&self) -> State {
        State {
            model: QueueModel::default(),
            requests: (0..self.requests)
                .map(|r| Request::Pushing {
                    id: fresh_id(r, 0),
                    pushes: 0,
                })
                .collect(),
            held: Vec::new(),
            ended: 0,
            now: START,
            pauses: self.pauses,
        }
    }

    fn fingerprint(&self, state: &mut State) -> Self::Print {
        let mut jobs: Vec<JobId> = state
            .requests
            .iter()
            .map(|request| match request {
                Request::Pushing { id, .. } => id.clone(),
                Request::Ended { job, .. } => job.clone(),
            })
            .chain(state.held.iter().map(|(id, ..)| id.clone()))
            .collect();
        jobs.sort();
        jobs.dedup();
        let jobs = jobs
            .into_iter()
            .map(|id| {
                let set = state.model.locate(&id).map(|(set, ..)| set);
                let envelope = state.model.inspect(&id).envelope;
                (id, set, envelope)
            })
            .collect();
        let pending = state
            .model
            .pending_job(&key())
            .map(|(id, revision)| (id.clone(), revision));
        // The clock moves only past every lease: how far it moved says no more than the
        // pauses left.
        (
            state.requests.clone(),
            state.held.iter().map(|(id, ..)| id.clone()).collect(),
            jobs,
            pending,
            state.ended,
            state.pauses,
        )
    }

    fn steps(&self, state: &mut State) -> Vec<Step> {
        let mut steps: Vec<Step> = (0..state.requests.len())
            .filter(|&r| matches!(state.requests[r], Request::Pushing { .. }))
            .map(Step::Push)
            .collect();
        if state.held.len() < HELD && state.model.stats(state.now).due > 0 {
            steps.push(Step::Claim);
        }
        steps.extend((0..state.held.len()).map(Step::Ack));
        if state.pauses > 0 && !state.held.is_empty() {
            steps.push(Step::Pause);
        }
        steps
    }

    fn apply(&self, state: &mut State, step: Step) -> Result<(), String> {
        match step {
            Step::Push(r) => {
                let Request::Pushing { id, pushes } = state.requests[r].clone() else {
                    return Err(format!("request {r} pushed after it ended"));
                };
                if pushes >= MAX_PUSHES {
                    return Err(format!("request {r} gave up after {pushes} pushes"));
                }
                let rules = PendingRules {
                    keep: self.keep,
                    debounce: None,
                    counters: Counters::Off,
                    arrived_ago: self.arrived_ago(r),
                };
                let envelope = vec![u8::try_from(r).map_err(|error| error.to_string())?];
                let pushes = pushes + 1;
                let pending_key = key();
                let job = PendingJob {
                    key: &pending_key,
                    id: &id,
                    envelope,
                    group: None,
                    rules,
                };
                let carried_by = match state.model.push_pending(job, state.now, state.now) {
                    PendingPush::Stored { .. } => id,
                    PendingPush::Joined { id, .. } | PendingPush::Newer { id, .. } => id,
                    PendingPush::EncodeFor(pending) => {
                        state.requests[r] = Request::Pushing { id: pending, pushes };
                        return Ok(());
                    }
                    PendingPush::Moved => {
                        state.requests[r] = Request::Pushing {
                            id: fresh_id(r, pushes),
                            pushes,
                        };
                        return Ok(());
                    }
                };
                if !matches!(state.model.locate(&carried_by), Some((JobSet::Waiting, ..))) {
                    return Err(format!(
                        "request {r} ended carried by {carried_by}, which does not wait"
                    ));
                }
                state.ended += 1;
                let waited = self.arrived_ago(r).as_millis() as i64;
                let arrival = (state.now - waited, state.ended);
                state.requests[r] = Request::Ended {
                    job: carried_by,
                    arrival,
                    ran: false,
                };
            }
            Step::Claim => {
                let claimed = state
                    .model
                    .claim(1, LEASE, self.token, LIMITS, Counters::Off, state.now);
                for job in claimed.jobs {
                    let payload = payload_of(&job.envelope);
                    let payload_arrival = state
                        .arrival(payload)
                        .ok_or_else(|| format!("{} runs request {payload}, which has not ended", job.id))?;
                    if self.keep == Keep::First && storer(&job.id) != Some(payload) {
                        return Err(format!(
                            "{} runs request {payload}, not the request that stored it",
                            job.id
                        ));
                    }
                    for (r, request) in state.requests.iter_mut().enumerate() {
                        let Request::Ended {
                            job: carried_by,
                            arrival,
                            ran,
                        } = request
                        else {
                            continue;
                        };
                        if *carried_by != job.id || *ran {
                            continue;
                        }
                        if self.keep == Keep::Latest && payload_arrival < *arrival {
                            return Err(format!(
                                "{} runs request {payload}, which arrived before request {r} it took in",
                                job.id
                            ));
                        }
                        *ran = true;
                    }
                    let lease_ends = state.now + LEASE.as_millis() as i64;
                    state
                        .held
                        .push((job.id.clone(), Hold::of(self.token, &job), lease_ends));
                }
            }
            Step::Ack(at) => {
                let (id, hold, lease_ends) = state.held.remove(at);
                let acked = state.model.ack(&[(&id, hold)], None, Counters::Off, state.now);
                if acked != [true] && state.now <= lease_ends {
                    return Err(format!("the ack of {id} was refused while its lease ran"));
                }
            }
            Step::Pause => {
                state.now += LEASE.as_millis() as i64 + 1;
                state.pauses -= 1;
            }
        }
        let fresh_waiting = state
            .requests
            .iter()
            .filter_map(|request| match request {
                Request::Ended { job, .. } => Some(job),
                Request::Pushing { .. } => None,
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter(|job| {
                matches!(state.model.locate(job), Some((JobSet::Waiting, ..)))
                    && state.model.expiries(job) == 0
            })
            .count();
        if fresh_waiting > 1 {
            return Err(format!("{fresh_waiting} jobs of the key wait"));
        }
        let everyone_ended = state
            .requests
            .iter()
            .all(|request| matches!(request, Request::Ended { .. }));
        if everyone_ended
            && state.held.is_empty()
            && state.drained()
            && let Some(r) = state
                .requests
                .iter()
                .position(|request| matches!(request, Request::Ended { ran: false, .. }))
        {
            return Err(format!(
                "request {r} was lost: the queue is empty and it never ran"
            ));
        }
        Ok(())
    }

    fn served(&self, state: &State) -> bool {
        state.held.is_empty()
            && state.drained()
            && state
                .requests
                .iter()
                .all(|request| matches!(request, Request::Ended { .. }))
    }

    fn gives_up(&self, _: Step) -> bool {
        false
    }
}

#[test]
fn requests_joining_a_pending_job_keep_the_latest_and_lose_none() {
    let config = Config::new(
        "3 requests on one key, keep latest, a pause",
        Keep::Latest,
        3,
        false,
        1,
    );
    explore::check(config.name, &config);
}

#[test]
fn a_request_that_waited_in_place_never_replaces_a_later_one() {
    let config = Config::new(
        "3 requests on one key, keep latest, the first waited in place, a pause",
        Keep::Latest,
        3,
        true,
        1,
    );
    explore::check(config.name, &config);
}

#[test]
fn requests_joining_a_pending_job_keep_the_first_and_lose_none() {
    let config = Config::new(
        "4 requests on one key, keep first, a pause",
        Keep::First,
        4,
        false,
        1,
    );
    explore::check(config.name, &config);
}
