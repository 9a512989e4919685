//! Every interleaving of a few callers on the lock's model (`redefer::lock::model`), explored
//! breadth first: small configurations of two or three callers on one to three keys, single
//! keys and sets, with a crash (a holder or a waiter that never comes back) and expiries (a
//! crashed holder's TTL, a reservation that runs out under a crashed or a slow waiter) as
//! events. In every reachable state:
//!
//! - at most one live caller holds a key, and the model says it is that caller's;
//! - each new holder's fencing token is above the key's last;
//! - a release hands the key to the first in its line, and a key is reserved only for a
//!   waiter in its line;
//! - a set is taken whole or not at all;
//! - from every reachable state, a state where every caller that did not crash nor give up
//!   is served is reachable, by steps where nobody gives up (no deadlock, no caller stuck in a
//!   line for good).
//!
//! A caller follows the layers' steps: an attempt out of line, then it joins the line (of
//! every key of its set) and attempts again whenever it likes (woken or by its timer), joining
//! again as it likes (a waiter dropped for a reservation it did not take comes back), or gives
//! up and leaves its lines; a holder releases its keys one by one. The clock stands still: TTLs run out only by the events
//! above. Fencing tokens and the lines' places grow without end, so two states that differ
//! only in them are one state (the checks above do not depend on them).
//!
//! Each run prints the states and transitions it explored and its time. Each rule was seen to
//! fail on a model broken in one line: a holder's check that takes any token (two holders),
//! a counter not raised (a token not above the last), a release to the last in line, a set
//! that takes its first key when refused, a leave that keeps the key reserved (reserved for a
//! waiter not in line), a reservation that ran out and never drops its waiter (a crashed
//! waiter blocks the others for good).

use crate::explore;

use std::time::Duration;

use explore::Protocol;
use redefer::LockKey;
use redefer::guard::Waiter;
use redefer::lock::model::{Holder, LockModel, Now};
use redefer::lock::{Acquisition, LockToken};
use redefer::lock_set::SetAcquisition;

const TTL: Duration = Duration::from_secs(60);

/// One configuration: which keys each caller wants, how many may crash, whether a live
/// waiter's reservation may run out (it came too late).
struct Config {
    name: &'static str,
    wants: Vec<Vec<usize>>,
    keys: usize,
    crashes: u8,
    slow_waiters: bool,
    /// How many times each caller comes for its keys.
    rounds: u8,
}

/// Where a caller is in its steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Caller {
    /// Not come yet.
    Idle,
    /// Its first attempt found the keys taken: it joins the line next.
    Blocked,
    /// In line (or dropped from it), attempting again.
    Waiting,
    /// Holds the keys whose bits are set, releasing them one by one.
    Holding(u8),
    Done,
    /// Gave up waiting and left its lines.
    GaveUp,
    Crashed,
}

#[derive(Clone)]
struct State {
    model: LockModel,
    callers: Vec<Caller>,
    /// How many more times each caller comes after this one.
    rounds_left: Vec<u8>,
    crashes_left: u8,
}

/// A key in a fingerprint: who has it (`true`: a holder; `false`: the waiter it is reserved
/// for), its line and the waiter it was last handed to, each as a caller's index.
type KeyPrint = (Option<(bool, usize)>, Vec<usize>, Option<usize>);

/// What a state is, fencing tokens and places in line aside.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Fingerprint {
    keys: Vec<KeyPrint>,
    callers: Vec<Caller>,
    rounds_left: Vec<u8>,
    crashes_left: u8,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Try(usize),
    Join(usize),
    Attempt(usize),
    Release(usize, usize),
    /// A waiter gives up (its longest wait passed): it leaves its lines.
    GiveUp(usize),
    Crash(usize),
    Expire(usize),
}

struct World {
    config: Config,
    keys: Vec<LockKey>,
    tokens: Vec<LockToken>,
    waiters: Vec<Waiter>,
}

impl World {
    fn new(config: Config) -> Self {
        let keys = (0..config.keys)
            .map(|key| LockKey::new(format!("k{key}")).expect("a valid key"))
            .collect();
        let tokens: Vec<_> = config.wants.iter().map(|_| LockToken::random()).collect();
        let waiters = tokens.iter().map(|token| Waiter::caller(*token)).collect();
        World {
            config,
            keys,
            tokens,
            waiters,
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

    fn wanted(&self, caller: usize) -> Vec<LockKey> {
        self.config.wants[caller]
            .iter()
            .map(|&key| self.keys[key].clone())
            .collect()
    }

    fn mask(&self, caller: usize) -> u8 {
        self.config.wants[caller]
            .iter()
            .fold(0, |mask, key| mask | 1 << key)
    }

    /// At most one live caller holds a key, and the model says it holds it; a key is reserved
    /// only for a waiter in its line (one that left hands it on at once).
    fn check_exclusion(&self, state: &mut State) -> Result<(), String> {
        for (index, key) in self.keys.iter().enumerate() {
            let believers: Vec<usize> = (0..state.callers.len())
                .filter(|&caller| matches!(state.callers[caller], Caller::Holding(mask) if mask & 1 << index != 0))
                .collect();
            if believers.len() > 1 {
                return Err(format!("{key} held by callers {believers:?} at once"));
            }
            let line = state.model.line(key);
            if let Some(Holder::Reserved { waiter, .. }) = state
                .model
                .holding(key, Duration::ZERO)
                .map(|holding| &holding.holder)
                && !line.contains(waiter)
            {
                return Err(format!("{key} reserved for {waiter:?}, who is not in its line"));
            }
            if let Some(&caller) = believers.first() {
                let holder = state
                    .model
                    .holding(key, Duration::ZERO)
                    .map(|holding| holding.holder.clone());
                if !matches!(holder, Some(Holder::Owner(token, _)) if token == self.tokens[caller]) {
                    return Err(format!(
                        "caller {caller} believes it holds {key}, which is {holder:?}"
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
            model: LockModel::new(TTL),
            callers: vec![Caller::Idle; self.tokens.len()],
            rounds_left: vec![self.config.rounds - 1; self.tokens.len()],
            crashes_left: self.config.crashes,
        }
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

    fn fingerprint(&self, state: &mut State) -> Fingerprint {
        let keys = self
            .keys
            .iter()
            .map(|key| {
                let holder = state
                    .model
                    .holding(key, Duration::ZERO)
                    .map(|holding| match &holding.holder {
                        Holder::Owner(token, _) => (true, self.caller_of_token(*token)),
                        Holder::Reserved { waiter, .. } => (false, self.caller_of_waiter(waiter)),
                    });
                let line = state
                    .model
                    .line(key)
                    .iter()
                    .map(|w| self.caller_of_waiter(w))
                    .collect();
                let handed = state.model.handed(key).map(|w| self.caller_of_waiter(w));
                (holder, line, handed)
            })
            .collect();
        Fingerprint {
            keys,
            callers: state.callers.clone(),
            rounds_left: state.rounds_left.clone(),
            crashes_left: state.crashes_left,
        }
    }

    fn steps(&self, state: &mut State) -> Vec<Step> {
        let mut steps = Vec::new();
        for (caller, now) in state.callers.iter().enumerate() {
            match *now {
                Caller::Idle => steps.push(Step::Try(caller)),
                Caller::Blocked => steps.push(Step::Join(caller)),
                Caller::Waiting => {
                    steps.extend([Step::Attempt(caller), Step::Join(caller), Step::GiveUp(caller)])
                }
                Caller::Holding(mask) => {
                    let key = mask.trailing_zeros() as usize;
                    steps.push(Step::Release(caller, key));
                }
                Caller::Done | Caller::GaveUp | Caller::Crashed => {}
            }
            if state.crashes_left > 0 && matches!(now, Caller::Holding(_) | Caller::Waiting) {
                steps.push(Step::Crash(caller));
            }
        }
        for (index, key) in self.keys.iter().enumerate() {
            let expires = match state
                .model
                .holding(key, Duration::ZERO)
                .map(|holding| &holding.holder)
            {
                Some(Holder::Owner(token, _)) => {
                    state.callers[self.caller_of_token(*token)] == Caller::Crashed
                }
                Some(Holder::Reserved { waiter, .. }) => {
                    self.config.slow_waiters
                        || state.callers[self.caller_of_waiter(waiter)] == Caller::Crashed
                }
                None => false,
            };
            if expires {
                steps.push(Step::Expire(index));
            }
        }
        steps
    }

    /// Takes `step` from `state`, checking the rules of a transition.
    fn apply(&self, state: &mut State, step: Step) -> Result<(), String> {
        let now = Now::at(Duration::ZERO);
        match step {
            Step::Try(caller) | Step::Attempt(caller) => {
                let waiter = matches!(step, Step::Attempt(_)).then(|| &self.waiters[caller]);
                let keys = self.wanted(caller);
                let before: Vec<u64> = keys.iter().map(|key| state.model.fence(key)).collect();
                let fences = if keys.len() == 1 {
                    match state
                        .model
                        .acquire(&keys[0], self.tokens[caller], TTL, waiter, now)
                        .acquisition
                    {
                        Acquisition::Acquired(fence) => Some(vec![fence]),
                        Acquisition::Held { .. } => None,
                    }
                } else {
                    match state
                        .model
                        .acquire_set(&keys, self.tokens[caller], TTL, waiter, now)
                        .0
                    {
                        SetAcquisition::Acquired(fences) => Some(fences),
                        SetAcquisition::Held(_) => None,
                    }
                };
                match fences {
                    Some(fences) => {
                        state.callers[caller] = Caller::Holding(self.mask(caller));
                        self.check_exclusion(state)?;
                        for ((key, before), fence) in keys.iter().zip(before).zip(fences) {
                            let fence = fence.map_or(0, |fence| fence.0);
                            if fence <= before {
                                return Err(format!("{key}: token {fence} not above the last, {before}"));
                            }
                        }
                    }
                    None => {
                        for key in &keys {
                            let holder = state
                                .model
                                .holding(key, Duration::ZERO)
                                .map(|holding| holding.holder.clone());
                            if matches!(holder, Some(Holder::Owner(token, _)) if token == self.tokens[caller])
                            {
                                return Err(format!("caller {caller} refused its set yet holds {key}"));
                            }
                        }
                        if matches!(step, Step::Try(_)) {
                            state.callers[caller] = Caller::Blocked;
                        }
                    }
                }
            }
            Step::Join(caller) => {
                let keys = self.wanted(caller);
                let waiter = &self.waiters[caller];
                let joined = if keys.len() == 1 {
                    state.model.join(&keys[0], waiter, None, None, now).is_ok()
                } else {
                    state.model.join_set(&keys, waiter, None, None, now).0.is_ok()
                };
                if !joined {
                    return Err(format!("caller {caller} refused by a line without a cap"));
                }
                state.callers[caller] = Caller::Waiting;
            }
            Step::Release(caller, key) => {
                let line = state.model.line(&self.keys[key]);
                let Some(released) = state
                    .model
                    .release(&self.keys[key], self.tokens[caller], None, now)
                else {
                    return Err(format!("caller {caller} lost k{key} while it held it"));
                };
                if released.handed.reserved.as_ref() != line.first() {
                    return Err(format!(
                        "k{key} went to {:?}, not the first in line {:?}",
                        released.handed.reserved,
                        line.first()
                    ));
                }
                let Caller::Holding(mask) = state.callers[caller] else {
                    unreachable!("only a holder releases")
                };
                let left = mask & !(1 << key);
                state.callers[caller] = match (left, state.rounds_left[caller]) {
                    (0, 0) => Caller::Done,
                    (0, _) => {
                        state.rounds_left[caller] -= 1;
                        Caller::Idle
                    }
                    _ => Caller::Holding(left),
                };
            }
            Step::GiveUp(caller) => {
                let keys = self.wanted(caller);
                let waiter = &self.waiters[caller];
                if keys.len() == 1 {
                    state.model.leave(&keys[0], waiter, now);
                } else {
                    state.model.leave_set(&keys, waiter, now);
                }
                state.callers[caller] = Caller::GaveUp;
            }
            Step::Crash(caller) => {
                state.callers[caller] = Caller::Crashed;
                state.crashes_left -= 1;
            }
            Step::Expire(key) => state.model.expire(&self.keys[key]),
        }
        self.check_exclusion(state)
    }
}

fn explore(config: Config) {
    let name = config.name;
    explore::check(name, &World::new(config));
}

#[test]
fn three_callers_on_one_key_with_a_crash() {
    explore(Config {
        name: "mutex, 3 callers, 1 crash",
        wants: vec![vec![0], vec![0], vec![0]],
        keys: 1,
        crashes: 1,
        slow_waiters: true,
        rounds: 2,
    });
}

#[test]
fn three_sets_in_a_cycle_with_a_crash() {
    explore(Config {
        name: "sets {k0,k1} {k1,k2} {k2,k0}, 1 crash",
        wants: vec![vec![0, 1], vec![1, 2], vec![2, 0]],
        keys: 3,
        crashes: 1,
        slow_waiters: false,
        rounds: 2,
    });
}

#[test]
fn a_set_between_two_single_keys_with_slow_waiters() {
    explore(Config {
        name: "set {k0,k1} beside k0 and k1, slow waiters",
        wants: vec![vec![0, 1], vec![0], vec![1]],
        keys: 2,
        crashes: 0,
        slow_waiters: true,
        rounds: 2,
    });
}

#[test]
fn two_sets_sharing_both_keys_with_a_crash_and_slow_waiters() {
    explore(Config {
        name: "sets {k0,k1} twice beside k1, 1 crash, slow waiters",
        wants: vec![vec![0, 1], vec![0, 1], vec![1]],
        keys: 2,
        crashes: 1,
        slow_waiters: true,
        rounds: 2,
    });
}
