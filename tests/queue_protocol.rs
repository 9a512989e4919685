//! Every interleaving of a few schedulers claiming jobs on the queue's model
//! (`redefer::queue::model`), explored breadth first (`support/explore.rs`): claims of up to
//! two jobs under one lease, acks, retries, lease extensions, a crashed scheduler, and the
//! clock moving past every lease (a scheduler that was slow, or dead), or to the end of the
//! first lease to the millisecond, at any time. Times are
//! seen relative to the clock (a lease live or run out; the waiting jobs' order and whether
//! each is due), so the states are finite.
//! In every reachable state:
//!
//! - no job is lost: every job pushed is waiting, in flight, dead, or done after an ack;
//! - a job is claimed again only once the lease it was under has ended (never early), and an
//!   ack, retry or extension acts only for the claim that holds it now (a scheduler whose
//!   lease ran out, or its own earlier run of the job, is refused);
//! - a job is done once at most (acked by one claim: exactly-once effect);
//! - each claim's fencing token is above every earlier one;
//! - from every reachable state, a state where every job is done or dead can be reached
//!   (at-least-once: a crashed scheduler's jobs come back once their lease runs out).
//!
//! Each rule was seen to fail on a model broken in one line: a hold checked by its token only
//! (a scheduler's earlier run acks the job its new claim holds), a lease recovered at its
//! deadline rather than after it (claimed again while it runs), a job whose lease ran out not
//! sent back to wait (lost), a claim's fence not raised, an extension that moves one job of the
//! claim only (claimed again while the claim's lease runs), an ack of a job held by another
//! claim.

use crate::explore;

use std::time::Duration;

use explore::Protocol;
use redefer::lock::LockToken;
use redefer::queue::model::QueueModel;
use redefer::queue::{ClaimLimits, Counters, Hold, JobId, JobSet};

const START: i64 = 1_800_000_000_000;
const LEASE: Duration = Duration::from_secs(30);
const LIMITS: ClaimLimits = ClaimLimits {
    max_envelope: 1024,
    max_expiries: 2,
};

struct Config {
    name: &'static str,
    jobs: usize,
    schedulers: usize,
    crashes: u8,
    /// Whether schedulers retry and extend besides acking.
    all_verbs: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Scheduler {
    Live,
    Crashed,
}

#[derive(Clone)]
struct State {
    model: QueueModel,
    now: i64,
    schedulers: Vec<Scheduler>,
    /// What each scheduler believes it holds: each job with its hold and when its lease ends
    /// (a scheduler whose lease ran out may still believe, and a job claimed again by the same
    /// scheduler is believed twice: its old run and its new).
    holding: Vec<Vec<Belief>>,
    /// Jobs acked, each once at most.
    done: Vec<bool>,
    /// The highest job fencing token handed out.
    last_fence: u64,
    crashes_left: u8,
}

/// A job as a fingerprint sees it: its set, the scheduler whose claim holds it, its time as
/// the rules read it (waiting: its place among the waiting and whether it is due; in flight:
/// whether its lease runs), and how many of its leases ran out.
type JobPrint = (Option<JobSet>, Option<usize>, Option<(usize, bool)>, u32);

#[derive(PartialEq, Eq, Hash)]
struct Fingerprint {
    jobs: Vec<JobPrint>,
    schedulers: Vec<Scheduler>,
    /// Each scheduler's beliefs: the job, whether its hold is the job's lease now, and its
    /// lease's end from now (-1: past).
    holding: Vec<Vec<(usize, bool, i64)>>,
    done: Vec<bool>,
    crashes_left: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Belief {
    job: usize,
    hold: Hold,
    deadline: i64,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Claim(usize),
    /// A scheduler acts on its belief (by its place in the scheduler's beliefs).
    Ack(usize, usize),
    Retry(usize, usize),
    Extend(usize, usize),
    Crash(usize),
    /// The clock moves past every lease.
    LeasesRunOut,
    /// The clock moves to the end of the first lease, to the millisecond.
    FirstLeaseEnds,
}

struct World {
    config: Config,
    ids: Vec<JobId>,
    tokens: Vec<LockToken>,
}

impl World {
    fn new(config: Config) -> Self {
        World {
            ids: (0..config.jobs)
                .map(|n| JobId::new(format!("job-{n}")).expect("a valid id"))
                .collect(),
            tokens: (0..config.schedulers).map(|_| LockToken::random()).collect(),
            config,
        }
    }

    fn scheduler_of(&self, hold: &Hold) -> usize {
        self.tokens
            .iter()
            .position(|token| *token == hold.token)
            .expect("a scheduler's token")
    }

    /// The rules of every state: no job lost, and the model's lease of each job in flight is
    /// one a scheduler was given.
    fn check_state(&self, state: &State) -> Result<(), String> {
        for (job, id) in self.ids.iter().enumerate() {
            match (state.model.locate(id), state.done[job]) {
                (None, false) => return Err(format!("job {job} is lost: nowhere, and never acked")),
                (Some((set, _, _)), true) => return Err(format!("job {job} acked, yet {set:?}")),
                (Some((JobSet::InFlight, Some(hold), _)), false) => {
                    let given = state.holding[self.scheduler_of(&hold)]
                        .iter()
                        .any(|belief| belief.job == job && belief.hold == hold);
                    if !given {
                        return Err(format!(
                            "job {job} in flight under a hold no scheduler was given: {hold:?}"
                        ));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// When the first lease still running ends, if after now (a time the rules turn at).
    fn first_lease_end(&self, state: &State) -> Option<i64> {
        self.ids
            .iter()
            .filter_map(|id| match state.model.locate(id) {
                Some((JobSet::InFlight, _, Some(deadline))) if deadline > state.now => Some(deadline),
                _ => None,
            })
            .min()
    }

    /// Whether `hold` is job `job`'s lease now.
    fn holds_now(&self, state: &State, job: usize, hold: Hold) -> bool {
        matches!(state.model.locate(&self.ids[job]), Some((JobSet::InFlight, Some(now), _)) if now == hold)
    }
}

impl Protocol for World {
    type State = State;
    type Step = Step;
    type Print = Fingerprint;

    fn initial(&self) -> State {
        let mut model = QueueModel::default();
        let jobs: Vec<(JobId, Vec<u8>)> = self.ids.iter().map(|id| (id.clone(), b"{}".to_vec())).collect();
        model.push_many(&jobs, START, None, START);
        State {
            model,
            now: START,
            schedulers: vec![Scheduler::Live; self.config.schedulers],
            holding: vec![Vec::new(); self.config.schedulers],
            done: vec![false; self.config.jobs],
            last_fence: 0,
            crashes_left: self.config.crashes,
        }
    }

    fn fingerprint(&self, state: &mut State) -> Fingerprint {
        let located: Vec<_> = self.ids.iter().map(|id| state.model.locate(id)).collect();
        let mut waiting: Vec<(i64, usize)> = located
            .iter()
            .enumerate()
            .filter_map(|(job, at)| match at {
                Some((JobSet::Waiting, _, Some(due))) => Some((*due, job)),
                _ => None,
            })
            .collect();
        waiting.sort_unstable_by_key(|&(due, job)| (due, self.ids[job].to_string()));
        let jobs = located
            .iter()
            .enumerate()
            .map(|(job, at)| {
                let set = at.map(|(set, _, _)| set);
                let holder = at
                    .and_then(|(_, hold, _)| hold)
                    .map(|hold| self.scheduler_of(&hold));
                let time = match at {
                    Some((JobSet::Waiting, _, Some(due))) => {
                        let place = waiting.iter().position(|&(_, other)| other == job).unwrap_or(0);
                        Some((place, *due <= state.now))
                    }
                    Some((JobSet::InFlight, _, Some(deadline))) => Some((0, *deadline >= state.now)),
                    _ => None,
                };
                (set, holder, time, state.model.expiries(&self.ids[job]))
            })
            .collect();
        let holding = state
            .holding
            .iter()
            .map(|held| {
                let from_now = |deadline: i64| {
                    if deadline < state.now {
                        -1
                    } else {
                        deadline - state.now
                    }
                };
                held.iter()
                    .map(|belief| {
                        (
                            belief.job,
                            self.holds_now(state, belief.job, belief.hold),
                            from_now(belief.deadline),
                        )
                    })
                    .collect()
            })
            .collect();
        Fingerprint {
            jobs,
            schedulers: state.schedulers.clone(),
            holding,
            done: state.done.clone(),
            crashes_left: state.crashes_left,
        }
    }

    fn steps(&self, state: &mut State) -> Vec<Step> {
        let mut steps = Vec::new();
        for (scheduler, now) in state.schedulers.iter().enumerate() {
            if *now == Scheduler::Crashed {
                continue;
            }
            steps.push(Step::Claim(scheduler));
            for belief in 0..state.holding[scheduler].len() {
                steps.push(Step::Ack(scheduler, belief));
                if self.config.all_verbs {
                    steps.extend([Step::Retry(scheduler, belief), Step::Extend(scheduler, belief)]);
                }
            }
            if state.crashes_left > 0 {
                steps.push(Step::Crash(scheduler));
            }
        }
        steps.push(Step::LeasesRunOut);
        if self.first_lease_end(state).is_some() {
            steps.push(Step::FirstLeaseEnds);
        }
        steps
    }

    fn apply(&self, state: &mut State, step: Step) -> Result<(), String> {
        let now = state.now;
        let lease_ms = LEASE.as_millis() as i64;
        match step {
            Step::Claim(scheduler) => {
                let token = self.tokens[scheduler];
                let batch = state.model.claim(2, LEASE, token, LIMITS, Counters::Off, now);
                for job in batch.jobs {
                    if job.fence <= state.last_fence {
                        return Err(format!("fence {} after {}", job.fence, state.last_fence));
                    }
                    state.last_fence = job.fence;
                    let index = self
                        .ids
                        .iter()
                        .position(|id| *id == job.id)
                        .expect("a pushed job");
                    // A lease never ends early: no other claim's may still run.
                    for (other, beliefs) in state.holding.iter().enumerate() {
                        if let Some(running) = beliefs
                            .iter()
                            .find(|belief| belief.job == index && belief.deadline >= now)
                        {
                            return Err(format!(
                                "job {index} claimed by {scheduler} at {now} while {other}'s lease runs until {}",
                                running.deadline
                            ));
                        }
                    }
                    state.holding[scheduler].push(Belief {
                        job: index,
                        hold: Hold::of(token, &job),
                        deadline: now + lease_ms,
                    });
                }
            }
            Step::Ack(scheduler, belief) => {
                let Belief { job, hold, .. } = state.holding[scheduler].remove(belief);
                let holds = self.holds_now(state, job, hold);
                let acked = state
                    .model
                    .ack(&[(&self.ids[job], hold)], None, Counters::Off, now);
                if acked != vec![holds] {
                    return Err(format!(
                        "an ack by {scheduler} of job {job} answered {acked:?}; its hold is the lease: {holds}"
                    ));
                }
                if holds {
                    if state.done[job] {
                        return Err(format!("job {job} done twice"));
                    }
                    state.done[job] = true;
                }
            }
            Step::Retry(scheduler, belief) => {
                let Belief { job, hold, .. } = state.holding[scheduler].remove(belief);
                let holds = self.holds_now(state, job, hold);
                let sent = state
                    .model
                    .retry(&self.ids[job], hold, None, Duration::ZERO, Counters::Off, now);
                if sent.is_some() != holds {
                    return Err(format!(
                        "a retry by {scheduler} of job {job} answered {sent:?}; its hold is the lease: {holds}"
                    ));
                }
            }
            Step::Extend(scheduler, belief) => {
                let Belief { job, hold, .. } = state.holding[scheduler][belief];
                let holds = self.holds_now(state, job, hold);
                let extended = state.model.extend_lease(&self.ids[job], hold, LEASE, now);
                if extended != holds {
                    return Err(format!(
                        "an extension by {scheduler} of job {job} answered {extended}; its hold is the lease: {holds}"
                    ));
                }
                if extended {
                    // The lease is the claim's: every job of it runs on.
                    for belief in state.holding[scheduler].iter_mut() {
                        if belief.hold.token == hold.token && belief.hold.claim == hold.claim {
                            belief.deadline = now + lease_ms;
                        }
                    }
                }
            }
            Step::Crash(scheduler) => {
                state.schedulers[scheduler] = Scheduler::Crashed;
                state.crashes_left -= 1;
            }
            Step::LeasesRunOut => state.now += lease_ms + 1,
            Step::FirstLeaseEnds => state.now = self.first_lease_end(state).expect("a lease that runs"),
        }
        self.check_state(state)
    }

    fn served(&self, state: &State) -> bool {
        self.ids
            .iter()
            .enumerate()
            .all(|(job, id)| state.done[job] || matches!(state.model.locate(id), Some((JobSet::Dead, _, _))))
    }

    fn gives_up(&self, _: Step) -> bool {
        false
    }
}

fn explore(config: Config) {
    let name = config.name;
    explore::check(name, &World::new(config));
}

#[test]
fn two_schedulers_three_jobs_with_a_crash_acking() {
    explore(Config {
        name: "2 schedulers, 3 jobs, 1 crash, acks only",
        jobs: 3,
        schedulers: 2,
        crashes: 1,
        all_verbs: false,
    });
}

#[test]
fn three_schedulers_two_jobs_with_a_crash() {
    explore(Config {
        name: "3 schedulers, 2 jobs, 1 crash",
        jobs: 2,
        schedulers: 3,
        crashes: 1,
        all_verbs: true,
    });
}

#[test]
fn two_schedulers_two_jobs_retrying_and_extending() {
    explore(Config {
        name: "2 schedulers, 2 jobs, 1 crash",
        jobs: 2,
        schedulers: 2,
        crashes: 1,
        all_verbs: true,
    });
}
