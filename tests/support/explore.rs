//! A breadth-first explorer of every interleaving of a protocol's steps (a module of the test
//! binaries that use it, beside `support`): the exhaustive checks of the guards' models. It
//! checks each transition's rules, then that from every reachable state a state where every
//! caller is served can be reached without anyone giving up: no deadlock, nobody stuck in a
//! line for good.

use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

/// A protocol as the explorer walks it.
pub trait Protocol {
    type State: Clone;
    type Step: Copy + Debug;
    /// What a state is, for telling states apart (what grows without end left out).
    type Print: Hash + Eq;

    fn initial(&self) -> Self::State;
    fn fingerprint(&self, state: &mut Self::State) -> Self::Print;
    /// The steps that may come next, by any caller or event.
    fn steps(&self, state: &mut Self::State) -> Vec<Self::Step>;
    /// Takes `step`, checking the rules: `Err` says which broke.
    fn apply(&self, state: &mut Self::State, step: Self::Step) -> Result<(), String>;
    /// Whether every caller is served (or crashed, or gave up).
    fn served(&self, state: &Self::State) -> bool;
    /// Whether `step` is a caller giving up, which serves nobody else.
    fn gives_up(&self, step: Self::Step) -> bool;
}

/// A broken rule, with the steps that led to it.
#[derive(Debug)]
pub struct Violation<Step> {
    pub rule: String,
    pub path: Vec<Step>,
}

/// Explores every state reachable from the start; returns how many states and transitions.
pub fn explore<P: Protocol>(protocol: &P) -> Result<(usize, usize), Violation<P::Step>> {
    let mut initial = protocol.initial();
    let mut index: HashMap<P::Print, usize> = HashMap::new();
    let mut parents: Vec<Option<(usize, P::Step)>> = vec![None];
    let mut successors: Vec<Vec<usize>> = vec![Vec::new()];
    let mut served = vec![protocol.served(&initial)];
    index.insert(protocol.fingerprint(&mut initial), 0);
    let mut frontier = VecDeque::from([(0, initial)]);
    let mut transitions = 0;
    let path_to = |parents: &[Option<(usize, P::Step)>], mut at: usize| {
        let mut path = Vec::new();
        while let Some((parent, step)) = parents[at] {
            path.push(step);
            at = parent;
        }
        path.reverse();
        path
    };
    while let Some((at, mut state)) = frontier.pop_front() {
        for step in protocol.steps(&mut state) {
            transitions += 1;
            let mut next = state.clone();
            if let Err(rule) = protocol.apply(&mut next, step) {
                let mut path = path_to(&parents, at);
                path.push(step);
                return Err(Violation { rule, path });
            }
            let fingerprint = protocol.fingerprint(&mut next);
            let to = match index.get(&fingerprint) {
                Some(&to) => to,
                None => {
                    let to = parents.len();
                    index.insert(fingerprint, to);
                    parents.push(Some((at, step)));
                    successors.push(Vec::new());
                    served.push(protocol.served(&next));
                    frontier.push_back((to, next));
                    to
                }
            };
            // Nobody is served by another's giving up: the way to the end may not use it.
            if !protocol.gives_up(step) {
                successors[at].push(to);
            }
        }
    }
    // Every state must reach, without anyone giving up, one where every caller was served:
    // walk back from those.
    let mut predecessors = vec![Vec::new(); successors.len()];
    for (from, tos) in successors.iter().enumerate() {
        for &to in tos {
            predecessors[to].push(from);
        }
    }
    let mut reaches = served.clone();
    let mut back: VecDeque<usize> = (0..served.len()).filter(|&state| served[state]).collect();
    while let Some(to) = back.pop_front() {
        for &from in &predecessors[to] {
            if !reaches[from] {
                reaches[from] = true;
                back.push_back(from);
            }
        }
    }
    if let Some(stuck) = reaches.iter().position(|reaches| !reaches) {
        return Err(Violation {
            rule: "from here, the callers that did not crash can never all be served".to_string(),
            path: path_to(&parents, stuck),
        });
    }
    Ok((parents.len(), transitions))
}

/// Explores `protocol`, printing what it explored and how long it took; panics with the path
/// to a broken rule.
pub fn check<P: Protocol>(name: &str, protocol: &P) {
    let started = Instant::now();
    match explore(protocol) {
        Ok((states, transitions)) => eprintln!(
            "{name}: {states} states, {transitions} transitions, every rule holds ({:?})",
            started.elapsed()
        ),
        Err(violation) => panic!("{name}: {}\nafter {:?}", violation.rule, violation.path),
    }
}
