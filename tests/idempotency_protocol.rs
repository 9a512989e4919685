//! Every interleaving of a few requests of one id on the idempotency guard's model
//! (`redefer::idempotency::model`), explored breadth first (`support/explore.rs`): each request
//! begins (finding its id new, or taken), keeps its record running while it runs, ends (its
//! record kept for the queue's retention, or forgotten) or dies mid-run; the clock moves a
//! second at a time, a bounded number of times. In every reachable state:
//!
//! - a request runs only while no other runs with its record still live: a second runs only
//!   once the first's record ran out (it died, or did not renew within its hold);
//! - a request that begins within the retention after one finished finds it finished;
//! - every request can end (it ran, or was told its id is taken), by steps where nobody gives
//!   up.
//!
//! Each rule was seen to fail on a model broken in one line: a begin that ignores a live
//! record (two run at once), an end that forgets the record it should keep (run again within
//! the retention), a renewal that takes a finished record for a running one (the retention
//! cut short: run again).

use crate::explore;

use std::time::Duration;

use explore::Protocol;
use redefer::idempotency::model::RequestModel;
use redefer::idempotency::{Begun, Seen};
use redefer::lock::LockToken;
use redefer::queue::JobId;

/// How long a record lives unless renewed, in seconds.
const HOLD: u64 = 2;

struct Config {
    name: &'static str,
    requests: usize,
    /// How long a finished request's record is kept (the queue's retention), in seconds.
    keep: Option<u64>,
    /// How many times the clock may move.
    ticks: u8,
    /// Each request's token.
    tokens: Vec<LockToken>,
}

impl Config {
    fn new(name: &'static str, keep: Option<u64>, ticks: u8) -> Config {
        Config {
            name,
            requests: REQUESTS,
            keep,
            ticks,
            tokens: (0..REQUESTS).map(|_| LockToken::random()).collect(),
        }
    }
}

/// How many requests of the id.
const REQUESTS: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Request {
    New,
    /// Runs; its record was last renewed (or begun) at this second.
    Running(u64),
    Ended,
    /// Told the id is taken.
    Duplicate,
    Died,
}

#[derive(Clone)]
struct State {
    records: RequestModel,
    now: u64,
    requests: Vec<Request>,
    ticks: u8,
    /// When a request last finished.
    finished_at: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Begin(usize),
    Renew(usize),
    End(usize),
    Die(usize),
    Tick,
}

fn id() -> JobId {
    JobId::new("order-7").expect("a valid id")
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

impl Protocol for Config {
    type State = State;
    type Step = Step;
    type Print = (
        Option<(String, Option<usize>, u64)>,
        u64,
        Vec<Request>,
        u8,
        Option<u64>,
    );

    fn initial(&self) -> State {
        State {
            records: RequestModel::default(),
            now: 0,
            requests: vec![Request::New; self.requests],
            ticks: self.ticks,
            finished_at: None,
        }
    }

    fn fingerprint(&self, state: &mut State) -> Self::Print {
        let record = state.records.record(&id()).map(|(seen, request, until)| {
            let request = request.and_then(|token| self.tokens.iter().position(|t| *t == token));
            (format!("{seen:?}"), request, until.as_secs())
        });
        (
            record,
            state.now,
            state.requests.clone(),
            state.ticks,
            state.finished_at,
        )
    }

    fn steps(&self, state: &mut State) -> Vec<Step> {
        let mut steps = Vec::new();
        for (r, request) in state.requests.iter().enumerate() {
            match request {
                Request::New => steps.push(Step::Begin(r)),
                Request::Running(_) => steps.extend([Step::Renew(r), Step::End(r), Step::Die(r)]),
                Request::Ended | Request::Duplicate | Request::Died => {}
            }
        }
        if state.ticks > 0 {
            steps.push(Step::Tick);
        }
        steps
    }

    fn apply(&self, state: &mut State, step: Step) -> Result<(), String> {
        let now = state.now;
        match step {
            Step::Begin(r) => match state
                .records
                .begin(&id(), None, self.tokens[r], secs(HOLD), secs(now))
            {
                Begun::New => {
                    let live = state
                        .requests
                        .iter()
                        .any(|other| matches!(other, Request::Running(at) if at + HOLD > now));
                    if live {
                        return Err(format!("request {r} runs beside one whose record is live"));
                    }
                    if let (Some(finished), Some(keep)) = (state.finished_at, self.keep)
                        && now < finished + keep
                    {
                        return Err(format!(
                            "request {r} runs again {}s after one finished, within the retention",
                            now - finished
                        ));
                    }
                    state.requests[r] = Request::Running(now);
                }
                Begun::Duplicate(_) => state.requests[r] = Request::Duplicate,
            },
            Step::Renew(r) => {
                // A renewal that finds no running record leaves the request running: its
                // hold lapsed, and another may run now.
                if state.records.extend(&id(), self.tokens[r], secs(HOLD), secs(now)) {
                    state.requests[r] = Request::Running(now);
                }
            }
            Step::End(r) => {
                state
                    .records
                    .end(&id(), self.tokens[r], self.keep.map(secs), secs(now));
                state.requests[r] = Request::Ended;
                state.finished_at = Some(now);
            }
            Step::Die(r) => state.requests[r] = Request::Died,
            Step::Tick => {
                state.now += 1;
                state.ticks -= 1;
            }
        }
        // What the model answers of the id agrees with the requests' own view.
        if let Some((Seen::Running, _, until)) = state.records.record(&id())
            && until > secs(state.now)
            && !state
                .requests
                .iter()
                .any(|request| matches!(request, Request::Running(_) | Request::Died))
        {
            return Err("a running record with no request that ran".to_string());
        }
        Ok(())
    }

    fn served(&self, state: &State) -> bool {
        state
            .requests
            .iter()
            .all(|request| matches!(request, Request::Ended | Request::Duplicate | Request::Died))
    }

    fn gives_up(&self, _: Step) -> bool {
        false
    }
}

#[test]
fn three_requests_of_one_id_never_run_together_while_its_record_lives() {
    let config = Config::new("3 requests of one id, forgotten at their end", None, 6);
    explore::check(config.name, &config);
}

#[test]
fn a_finished_request_is_not_run_again_within_the_retention() {
    let config = Config::new("3 requests of one id, kept 3 s once finished", Some(3), 7);
    explore::check(config.name, &config);
}
