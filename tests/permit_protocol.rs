//! Every interleaving of a few callers on the permits' model (`redefer::semaphore::model`),
//! explored breadth first (`support/explore.rs`): readers and writers on one key with a limit,
//! with a crash (a holder or a waiter that never comes back) and expiries (a crashed holder's
//! permit, a reservation under a crashed or a slow waiter) as events. In every reachable state:
//!
//! - at most the limit of live callers hold a permit, a writer alone, and the model says each
//!   holds one;
//! - each new permit's fencing token is above every token of the key before it;
//! - the permits reserved are for the first waiters in line, in its order (reserved waiters
//!   stand at its front);
//! - from every reachable state, a state where every caller that did not crash nor give up is
//!   served is reachable, by steps where nobody gives up (no deadlock, and no writer nor
//!   reader stuck in the line for good).
//!
//! A caller follows the layers' steps: an attempt out of line, then it joins the line and
//! attempts again whenever it likes, joining again as it likes, or gives up and leaves; a
//! holder releases its permit. The clock stands still: permits and reservations run out only
//! by the events above. Fencing tokens and places in line grow without end, so states that
//! differ only in them are one.
//!
//! Each rule was seen to fail on a model broken in one line: a limit checked by `<=` (three
//! holders of two permits), a writer that fits beside readers, a counter not raised (a token
//! not above the last), readers reserved past a waiting writer, a leave that keeps its
//! reservation, a reservation that ran out and keeps its waiter in line (a crashed waiter
//! blocks the line for good).

use crate::explore;

use std::time::Duration;

use explore::Protocol;
use redefer::LockKey;
use redefer::guard::Waiter;
use redefer::lock::model::Now;
use redefer::lock::{Acquisition, Holders, LockToken};
use redefer::semaphore::model::PermitModel;

const TTL: Duration = Duration::from_secs(60);

/// One configuration: the key's limit, which callers write, how many may crash, whether a live
/// waiter's reservation may run out (it came too late), how many times each caller comes.
struct Config {
    name: &'static str,
    limit: u32,
    writes: Vec<bool>,
    crashes: u8,
    slow_waiters: bool,
    rounds: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Caller {
    Idle,
    Blocked,
    Waiting,
    Holding,
    Done,
    GaveUp,
    Crashed,
}

#[derive(Clone)]
struct State {
    model: PermitModel,
    callers: Vec<Caller>,
    rounds_left: Vec<u8>,
    crashes_left: u8,
}

/// What a state is, fencing tokens and places in line aside: holders, reservations and line
/// as callers' indexes.
#[derive(PartialEq, Eq, Hash)]
struct Fingerprint {
    holders: Vec<usize>,
    reserved: Vec<usize>,
    line: Vec<usize>,
    callers: Vec<Caller>,
    rounds_left: Vec<u8>,
    crashes_left: u8,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Try(usize),
    Join(usize),
    Attempt(usize),
    Release(usize),
    GiveUp(usize),
    Crash(usize),
    ExpirePermit(usize),
    ExpireReservation(usize),
}

struct World {
    config: Config,
    key: LockKey,
    tokens: Vec<LockToken>,
    waiters: Vec<Waiter>,
}

impl World {
    fn new(config: Config) -> Self {
        let tokens: Vec<_> = config.writes.iter().map(|_| LockToken::random()).collect();
        let waiters = tokens.iter().map(|token| Waiter::caller(*token)).collect();
        World {
            config,
            key: LockKey::new("k").expect("a valid key"),
            tokens,
            waiters,
        }
    }

    fn holders(&self, caller: usize) -> Holders {
        if self.config.writes[caller] {
            Holders::Writer(self.config.limit)
        } else {
            Holders::Permits(self.config.limit)
        }
    }

    fn caller_of_token(&self, token: LockToken) -> usize {
        self.tokens
            .iter()
            .position(|t| *t == token)
            .expect("a caller's token")
    }

    fn caller_of_waiter(&self, waiter: &Waiter) -> usize {
        self.waiters
            .iter()
            .position(|w| w == waiter)
            .expect("a caller's waiter")
    }

    /// The callers holding a live permit, by the model.
    fn model_holders(&self, state: &State) -> Vec<usize> {
        let mut holders: Vec<usize> = state
            .model
            .holders(&self.key, Duration::ZERO)
            .into_iter()
            .map(|(token, _)| self.caller_of_token(token))
            .collect();
        holders.sort_unstable();
        holders
    }

    /// The rules of every state: the holders within the limit, a writer alone, as the model
    /// says; the reservations at the front of the line (once what ran out is dropped).
    fn check_state(&self, state: &State) -> Result<(), String> {
        let believers: Vec<usize> = (0..state.callers.len())
            .filter(|&caller| state.callers[caller] == Caller::Holding)
            .collect();
        if believers.len() > self.config.limit as usize {
            return Err(format!(
                "callers {believers:?} hold permits at once, over the limit"
            ));
        }
        if believers.len() > 1 && believers.iter().any(|&caller| self.config.writes[caller]) {
            return Err(format!("a writer holds beside others: {believers:?}"));
        }
        let holders = self.model_holders(state);
        for caller in &believers {
            if !holders.contains(caller) {
                return Err(format!(
                    "caller {caller} believes it holds a permit; the model's holders are {holders:?}"
                ));
            }
        }
        // What ran out is dropped at the next operation on the key: look as it will.
        let mut pruned = state.model.clone();
        let nobody = Waiter::caller(LockToken::random());
        pruned.leave(
            &self.key,
            &nobody,
            Holders::Permits(self.config.limit),
            Now::at(Duration::ZERO),
        );
        let line: Vec<usize> = pruned
            .line(&self.key)
            .iter()
            .map(|(waiter, _)| self.caller_of_waiter(waiter))
            .collect();
        let mut reserved: Vec<usize> = pruned
            .reserved(&self.key, Duration::ZERO)
            .iter()
            .map(|waiter| self.caller_of_waiter(waiter))
            .collect();
        reserved.sort_unstable();
        let mut front = line[..reserved.len().min(line.len())].to_vec();
        front.sort_unstable();
        if front != reserved {
            return Err(format!(
                "permits reserved for {reserved:?}, not the first in line {line:?}"
            ));
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
            model: PermitModel::new(TTL),
            callers: vec![Caller::Idle; self.tokens.len()],
            rounds_left: vec![self.config.rounds - 1; self.tokens.len()],
            crashes_left: self.config.crashes,
        }
    }

    fn fingerprint(&self, state: &mut State) -> Fingerprint {
        let mut reserved: Vec<usize> = state
            .model
            .reserved(&self.key, Duration::ZERO)
            .iter()
            .map(|waiter| self.caller_of_waiter(waiter))
            .collect();
        reserved.sort_unstable();
        Fingerprint {
            holders: self.model_holders(state),
            reserved,
            line: state
                .model
                .line(&self.key)
                .iter()
                .map(|(waiter, _)| self.caller_of_waiter(waiter))
                .collect(),
            callers: state.callers.clone(),
            rounds_left: state.rounds_left.clone(),
            crashes_left: state.crashes_left,
        }
    }

    fn steps(&self, state: &mut State) -> Vec<Step> {
        let mut steps = Vec::new();
        for (caller, now) in state.callers.iter().enumerate() {
            match now {
                Caller::Idle => steps.push(Step::Try(caller)),
                Caller::Blocked => steps.push(Step::Join(caller)),
                Caller::Waiting => {
                    steps.extend([Step::Attempt(caller), Step::Join(caller), Step::GiveUp(caller)])
                }
                Caller::Holding => steps.push(Step::Release(caller)),
                Caller::Done | Caller::GaveUp | Caller::Crashed => {}
            }
            if state.crashes_left > 0 && matches!(now, Caller::Holding | Caller::Waiting) {
                steps.push(Step::Crash(caller));
            }
        }
        for holder in self.model_holders(state) {
            if state.callers[holder] == Caller::Crashed {
                steps.push(Step::ExpirePermit(holder));
            }
        }
        for waiter in state.model.reserved(&self.key, Duration::ZERO) {
            let caller = self.caller_of_waiter(&waiter);
            if self.config.slow_waiters || state.callers[caller] == Caller::Crashed {
                steps.push(Step::ExpireReservation(caller));
            }
        }
        steps
    }

    fn apply(&self, state: &mut State, step: Step) -> Result<(), String> {
        let now = Now::at(Duration::ZERO);
        let key = &self.key;
        match step {
            Step::Try(caller) | Step::Attempt(caller) => {
                let waiter = matches!(step, Step::Attempt(_)).then(|| &self.waiters[caller]);
                let before = state.model.fence(key);
                let acquired =
                    state
                        .model
                        .acquire(key, self.tokens[caller], TTL, self.holders(caller), waiter, now);
                match acquired.acquisition {
                    Acquisition::Acquired(fence) => {
                        state.callers[caller] = Caller::Holding;
                        self.check_state(state)?;
                        let fence = fence.map_or(0, |fence| fence.0);
                        if fence <= before {
                            return Err(format!("token {fence} not above the last, {before}"));
                        }
                    }
                    Acquisition::Held { .. } => {
                        if matches!(step, Step::Try(_)) {
                            state.callers[caller] = Caller::Blocked;
                        }
                    }
                }
            }
            Step::Join(caller) => {
                let (joined, _) =
                    state
                        .model
                        .join(key, &self.waiters[caller], None, self.holders(caller), None, now);
                if joined.is_err() {
                    return Err(format!("caller {caller} refused by a line without a cap"));
                }
                state.callers[caller] = Caller::Waiting;
            }
            Step::Release(caller) => {
                let (released, _) =
                    state
                        .model
                        .release(key, self.tokens[caller], self.holders(caller), None, now);
                if !released {
                    return Err(format!("caller {caller} lost its permit while it held it"));
                }
                state.callers[caller] = if state.rounds_left[caller] == 0 {
                    Caller::Done
                } else {
                    state.rounds_left[caller] -= 1;
                    Caller::Idle
                };
            }
            Step::GiveUp(caller) => {
                state
                    .model
                    .leave(key, &self.waiters[caller], self.holders(caller), now);
                state.callers[caller] = Caller::GaveUp;
            }
            Step::Crash(caller) => {
                state.callers[caller] = Caller::Crashed;
                state.crashes_left -= 1;
            }
            Step::ExpirePermit(caller) => state
                .model
                .expire_permit(key, self.tokens[caller], Duration::ZERO),
            Step::ExpireReservation(caller) => {
                state
                    .model
                    .expire_reservation(key, &self.waiters[caller], Duration::ZERO)
            }
        }
        self.check_state(state)
    }

    fn served(&self, state: &State) -> bool {
        state
            .callers
            .iter()
            .all(|caller| matches!(caller, Caller::Done | Caller::GaveUp | Caller::Crashed))
    }

    fn gives_up(&self, step: Step) -> bool {
        matches!(step, Step::GiveUp(_))
    }
}

fn explore(config: Config) {
    let name = config.name;
    explore::check(name, &World::new(config));
}

#[test]
fn four_callers_on_two_permits_with_a_crash() {
    explore(Config {
        name: "semaphore of 2, 4 callers, 1 crash",
        limit: 2,
        writes: vec![false; 4],
        crashes: 1,
        slow_waiters: true,
        rounds: 1,
    });
}

#[test]
fn readers_beside_a_writer_with_a_crash() {
    explore(Config {
        name: "read-write of 2 readers, 2 readers and a writer, 1 crash",
        limit: 2,
        writes: vec![false, true, false],
        crashes: 1,
        slow_waiters: false,
        rounds: 2,
    });
}

#[test]
fn two_writers_among_readers_with_slow_waiters() {
    explore(Config {
        name: "read-write of 3 readers, 2 writers and 2 readers, slow waiters",
        limit: 3,
        writes: vec![true, false, true, false],
        crashes: 0,
        slow_waiters: true,
        rounds: 2,
    });
}

#[test]
fn three_callers_on_two_permits_coming_twice() {
    explore(Config {
        name: "semaphore of 2, 3 callers twice each, 1 crash, slow waiters",
        limit: 2,
        writes: vec![false; 3],
        crashes: 1,
        slow_waiters: true,
        rounds: 2,
    });
}
