//! Every interleaving of a few requests on the throttle's model (`redefer::throttle::model`),
//! explored breadth first (`support/explore.rs`): callers asking on their own, jobs booking a
//! slot and coming for it later, an upstream closing the key for longer than a job waits in
//! its run, an operator reopening it early, and the clock moving half an interval or to the
//! key's next slot. In every reachable state:
//!
//! - nothing starts before the key reopens once it was closed (a request decided after the
//!   closing, booked before it or not), at its time or when an operator reopens it;
//! - over any span between two starts, at most `burst + span / interval` start (GCRA);
//! - a job's booking holds: booking again gives the same slot (or its start, once sent back),
//!   and a job that comes for it is never decided as a new request;
//! - every job can still start (it is served), by steps where nobody gives up.
//!
//! The clock moves only by the steps above, a bounded number of times. Each rule was seen to
//! fail on a model broken in one line: a closing that leaves the runs' time as it was (a
//! start before the reopening), a booking not found again, a job sent back without its start
//! kept (booked again elsewhere), half an interval per admission (two starts within one), a
//! reopening that forgets the schedule its closing found (a burst spent just before the
//! closing spent again just after the reopening).

use crate::explore;

use std::time::Duration;

use explore::Protocol;
use redefer::LockKey;
use redefer::guard::Waiter;
use redefer::lock::LockToken;
use redefer::queue::{JobId, QueueName};
use redefer::throttle::model::ThrottleModel;
use redefer::throttle::{Admission, Rate};

/// Where the clock starts, µs since the epoch.
const START: u64 = 1_800_000_000_000_000;

struct Config {
    name: &'static str,
    rate: Rate,
    callers: usize,
    jobs: usize,
    /// How long the upstream closes the key, if it does (once).
    closes_for: Option<Duration>,
    /// Whether an operator may reopen the closed key early (once).
    reopens: bool,
    /// How many times the clock may move.
    ticks: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Job {
    New,
    /// Booked its slot (µs since the epoch).
    Booked(u64),
    /// Sent back to wait for its start (µs since the epoch).
    SentBack(u64),
    Started,
}

#[derive(Clone)]
struct State {
    model: ThrottleModel,
    now: u64,
    callers_started: Vec<bool>,
    jobs: Vec<Job>,
    /// When the key reopens, once it was closed.
    closed_until: Option<u64>,
    reopened: bool,
    /// The starts so far, µs since the epoch, in order.
    starts: Vec<u64>,
    ticks_left: u8,
}

#[derive(PartialEq, Eq, Hash)]
struct Fingerprint {
    times: Option<(u64, u64)>,
    bookings: Vec<(usize, u64, bool)>,
    now: u64,
    callers_started: Vec<bool>,
    jobs: Vec<Job>,
    closed_until: Option<u64>,
    reopened: bool,
    starts: Vec<u64>,
    ticks_left: u8,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Ask(usize),
    Book(usize),
    Come(usize),
    Close,
    Reopen,
    TickHalf,
    TickToSlot,
}

struct World {
    config: Config,
    key: LockKey,
    jobs: Vec<Waiter>,
}

impl World {
    fn new(config: Config) -> Self {
        let queue = QueueName::new("calls").expect("a valid queue name");
        let jobs = (0..config.jobs)
            .map(|n| Waiter::job(&queue, &JobId::new(format!("job-{n}")).expect("a valid id")))
            .collect();
        World {
            config,
            key: LockKey::new("api.example.com").expect("a valid key"),
            jobs,
        }
    }

    fn interval(&self) -> u64 {
        self.config.rate.interval().as_micros() as u64
    }

    /// A start at `at`, decided now: after any closing's end; within the rate.
    fn start(&self, state: &mut State, at: u64) -> Result<(), String> {
        if let Some(until) = state.closed_until
            && at < until
        {
            return Err(format!(
                "a start at +{} µs, before the reopening at +{} µs",
                at - START,
                until - START
            ));
        }
        state.starts.push(at);
        state.starts.sort_unstable();
        let burst = u64::from(self.config.rate.burst_size());
        for (i, first) in state.starts.iter().enumerate() {
            for (j, last) in state.starts.iter().enumerate().skip(i) {
                let allowed = burst + (last - first) / self.interval();
                if (j - i + 1) as u64 > allowed {
                    return Err(format!(
                        "{} starts within {} µs, more than {allowed}: {:?}",
                        j - i + 1,
                        last - first,
                        state.starts.iter().map(|start| start - START).collect::<Vec<_>>()
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Protocol for World {
    type State = State;
    type Step = Step;
    type Print = Fingerprint;

    fn initial(&self) -> State {
        State {
            model: ThrottleModel::new(),
            now: START,
            callers_started: vec![false; self.config.callers],
            jobs: vec![Job::New; self.config.jobs],
            closed_until: None,
            reopened: false,
            starts: Vec::new(),
            ticks_left: self.config.ticks,
        }
    }

    fn fingerprint(&self, state: &mut State) -> Fingerprint {
        let bookings = state
            .model
            .bookings(&self.key)
            .into_iter()
            .map(|(waiter, slot, sent_back)| {
                let job = self
                    .jobs
                    .iter()
                    .position(|job| *job == waiter)
                    .expect("a job's booking");
                (job, slot, sent_back)
            })
            .collect();
        Fingerprint {
            times: state.model.times(&self.key),
            bookings,
            now: state.now,
            callers_started: state.callers_started.clone(),
            jobs: state.jobs.clone(),
            closed_until: state.closed_until,
            reopened: state.reopened,
            starts: state.starts.clone(),
            ticks_left: state.ticks_left,
        }
    }

    fn steps(&self, state: &mut State) -> Vec<Step> {
        let mut steps: Vec<Step> = (0..self.config.callers)
            .filter(|&caller| !state.callers_started[caller])
            .map(Step::Ask)
            .collect();
        for (job, now) in state.jobs.iter().enumerate() {
            match now {
                Job::New => steps.push(Step::Book(job)),
                Job::Booked(_) | Job::SentBack(_) => steps.extend([Step::Book(job), Step::Come(job)]),
                Job::Started => {}
            }
        }
        if self.config.closes_for.is_some() && state.closed_until.is_none() {
            steps.push(Step::Close);
        }
        if self.config.reopens && !state.reopened && state.closed_until.is_some_and(|until| state.now < until)
        {
            steps.push(Step::Reopen);
        }
        if state.ticks_left > 0 {
            steps.extend([Step::TickHalf, Step::TickToSlot]);
        }
        steps
    }

    fn apply(&self, state: &mut State, step: Step) -> Result<(), String> {
        let (rate, key, now) = (self.config.rate, &self.key, state.now);
        match step {
            Step::Ask(caller) => {
                // A caller waiting in place asks with its own token: a request without a booking.
                let _ = LockToken::random();
                if state.model.admit(key, rate, None, now) == Admission::Admitted {
                    state.callers_started[caller] = true;
                    self.start(state, now)?;
                }
            }
            Step::Book(job) => {
                let slot = state.model.book(key, rate, &self.jobs[job], now);
                match state.jobs[job] {
                    Job::New => state.jobs[job] = Job::Booked(slot),
                    Job::Booked(booked) | Job::SentBack(booked) if booked != slot => {
                        return Err(format!(
                            "job {job} booked again at +{} µs, not its +{} µs",
                            slot - START,
                            booked - START
                        ));
                    }
                    _ => {}
                }
            }
            Step::Come(job) => match state.model.admit(key, rate, Some(&self.jobs[job]), now) {
                Admission::Redeemed { wait } => {
                    state.jobs[job] = Job::Started;
                    self.start(state, now + wait.as_micros() as u64)?;
                }
                Admission::Throttled { opens_in } => {
                    state.jobs[job] = Job::SentBack(now + opens_in.as_micros() as u64);
                }
                Admission::Admitted => {
                    return Err(format!("job {job} admitted as a new request, its booking lost"));
                }
            },
            Step::Close => {
                let duration = self.config.closes_for.expect("a closing configured");
                state.model.close(key, rate, duration, now);
                state.closed_until = Some(now + duration.as_micros() as u64);
            }
            Step::Reopen => {
                if state.model.reopen(key, now).is_none() {
                    return Err("a closed key not reopened".to_string());
                }
                state.closed_until = Some(now);
                state.reopened = true;
            }
            Step::TickHalf => {
                state.now += self.interval() / 2;
                state.ticks_left -= 1;
            }
            Step::TickToSlot => {
                if let Some((free_at, run_free_at)) = state.model.times(key) {
                    state.now = state.now.max(free_at.max(run_free_at));
                }
                let sent_back = state.jobs.iter().filter_map(|job| match job {
                    Job::SentBack(start) => Some(*start),
                    _ => None,
                });
                if let Some(start) = sent_back.min() {
                    state.now = state.now.max(start);
                }
                state.ticks_left -= 1;
            }
        }
        Ok(())
    }

    fn served(&self, state: &State) -> bool {
        state.ticks_left == 0 || state.jobs.iter().all(|job| *job == Job::Started)
    }

    fn gives_up(&self, _: Step) -> bool {
        false
    }
}

fn explore(config: Config) {
    let name = config.name;
    explore::check(name, &World::new(config));
}

fn rate(count: u32, per: Duration, burst: u32) -> Rate {
    Rate::new(count, per)
        .and_then(|rate| rate.burst(burst))
        .expect("a valid rate")
}

#[test]
fn callers_and_jobs_within_a_burst_of_two() {
    explore(Config {
        name: "2 callers and 2 jobs, 1 per 10 ms, burst 2",
        rate: rate(1, Duration::from_millis(10), 2),
        callers: 2,
        jobs: 2,
        closes_for: None,
        reopens: false,
        ticks: 4,
    });
}

#[test]
fn a_closing_longer_than_a_run_waits_sends_jobs_back() {
    explore(Config {
        name: "1 caller and 2 jobs, 1 per 10 ms, closed for 1.5 s",
        rate: rate(1, Duration::from_millis(10), 1),
        callers: 1,
        jobs: 2,
        closes_for: Some(Duration::from_millis(1_500)),
        reopens: false,
        ticks: 4,
    });
}

#[test]
fn a_key_reopened_early_keeps_its_rate_across_the_closing() {
    explore(Config {
        name: "2 callers and 1 job, 1 per 10 ms, burst 2, closed for 1.5 s, reopened early",
        rate: rate(1, Duration::from_millis(10), 2),
        callers: 2,
        jobs: 1,
        closes_for: Some(Duration::from_millis(1_500)),
        reopens: true,
        ticks: 3,
    });
}
