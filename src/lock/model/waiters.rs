//! A key's line in the models: its waiters in arrival order, as the `WAITERS` sorted set of
//! the Redis scripts. The mutex's and the permits' lines are the same (`line.lua`,
//! `line_join.lua`).

use std::collections::{BTreeMap, HashMap};

use crate::guard::{LineCap, Overflow, Waiter};

/// The most line entries one join looks at for jobs to drop (`MAX_EVICTION_SCAN` of
/// `line_join.lua`).
const MAX_EVICTION_SCAN: usize = 1000;

/// One key's line: waiters by arrival order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Waiters {
    pub(crate) order: BTreeMap<u64, Waiter>,
    pub(crate) place: HashMap<Waiter, u64>,
    /// The waiter a mutex key was last reserved for, until it takes it (a semaphore's
    /// reservations carry deadlines of their own).
    pub(crate) handed: Option<Waiter>,
}

impl Waiters {
    pub(crate) fn head(&self) -> Option<&Waiter> {
        self.order.values().next()
    }

    pub(crate) fn remove(&mut self, waiter: &Waiter) -> Option<u64> {
        let place = self.place.remove(waiter)?;
        self.order.remove(&place);
        Some(place)
    }

    pub(crate) fn ahead_of(&self, waiter: Option<&Waiter>) -> u64 {
        match waiter.and_then(|w| self.place.get(w)) {
            Some(place) => self.order.range(..place).count() as u64,
            None => self.order.len() as u64,
        }
    }

    /// Puts `waiter` at the end of the line, or in the place of `replacing`; already in line,
    /// it keeps its place. One that comes back to the line starts afresh: the key's handoff to
    /// it, if it was the last (its reservation ran out, or another caller took the key and gave
    /// it back since), is forgotten, so that it is not dropped as a waiter whose reservation
    /// ran out unused (`forget_old_handoff` in `lock_prelude.lua`).
    pub(crate) fn join(&mut self, waiter: &Waiter, replacing: Option<&Waiter>) {
        let taken = replacing.and_then(|replaced| self.remove(replaced));
        if self.place.contains_key(waiter) {
            return;
        }
        if self.handed.as_ref() == Some(waiter) {
            self.handed = None;
        }
        let place = taken.unwrap_or_else(|| self.order.keys().next_back().map_or(1, |last| last + 1));
        self.order.insert(place, waiter.clone());
        self.place.insert(waiter.clone(), place);
    }

    /// Makes room for `waiter` within `cap`, as `make_room` in `line_join.lua`: the waiters
    /// evicted (the oldest jobs, none that `reserved` protects), or `Err` with how many wait
    /// when it is refused (nothing changed).
    pub(crate) fn make_room(
        &mut self,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        cap: Option<LineCap>,
        reserved: impl Fn(&Waiter) -> bool,
    ) -> Result<Vec<Waiter>, u64> {
        let evicted = self.room_for(waiter, replacing, cap, reserved)?;
        for gone in &evicted {
            self.remove(gone);
        }
        Ok(evicted)
    }

    /// The room [`make_room`](Self::make_room) would make, changing nothing: a set's join
    /// looks at every key's line before it changes any.
    pub(crate) fn room_for(
        &self,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        cap: Option<LineCap>,
        reserved: impl Fn(&Waiter) -> bool,
    ) -> Result<Vec<Waiter>, u64> {
        let Some(cap) = cap else { return Ok(Vec::new()) };
        if self.place.contains_key(waiter) {
            return Ok(Vec::new());
        }
        let replaced = replacing.is_some_and(|replaced| self.place.contains_key(replaced));
        let waiting = self.order.len() as u64 - u64::from(replaced);
        let excess = (waiting + 1).saturating_sub(cap.max);
        if excess == 0 {
            return Ok(Vec::new());
        }
        if cap.overflow == Overflow::RefuseNewest || excess > MAX_EVICTION_SCAN as u64 {
            return Err(waiting);
        }
        let evicted: Vec<Waiter> = self
            .order
            .values()
            .take(MAX_EVICTION_SCAN)
            .filter(|candidate| {
                candidate.as_job().is_some() && Some(*candidate) != replacing && !reserved(candidate)
            })
            .take(excess as usize)
            .cloned()
            .collect();
        if (evicted.len() as u64) < excess {
            return Err(waiting);
        }
        Ok(evicted)
    }
}
