//! The set's part of the one call path (`guard/call.rs`): an attempt takes the next group of
//! the set's keys (all of them, on one Redis or in memory) or none, a conflict names the key
//! that will keep the call waiting longest; waiting is in every line of the group, told of each
//! handoff; the request runs with every key renewed, and every key is released on every exit
//! path.

use std::panic::resume_unwind;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::{join_all, try_join_all};
use tokio::time::Instant;

use super::line::set_line_of;
use super::name::set_name;
use super::{HeldKey, KeySetExtractor, LockSetLayer, LockSetStore, MAX_SET_KEYS, SetAcquisition};
use crate::error::{KeyError, StoreError};
use crate::guard::{Attempt, CallResult, ConflictKind, Contended, Error, HeldConflict, OverHandler, Woken};
use crate::guard::{SendHandler, Waiter};
use crate::key::LockKey;
use crate::lock::{
    Caller, ExpiryWatches, FencingToken, Handoffs, HeldLock, Holders, LISTEN_WITHIN, LockSpace, LockStore,
    ReleaseOnDrop, StopListener, Watching, estimate_wait, held_by_caller, hold_ended, run_renewed,
    wait_for_turn,
};
use crate::metric_names;
use crate::renewal::{Lease, Renewal};
use crate::strategy::{ConflictStrategy, Decision};

/// What one call for a set keeps from attempt to attempt.
pub struct SetAttempts<St: LockStore> {
    space: LockSpace,
    caller: Caller,
    /// The set's keys in the groups the store takes in one step, found at the first attempt.
    groups: Vec<Vec<LockKey>>,
    /// How many groups, from the first, the call holds.
    held: usize,
    /// The fencing token of each key held, in the order of the groups' keys.
    fences: Vec<Option<FencingToken>>,
    /// One per key, in the order of the groups' keys: each releases its key (and leaves its
    /// line) on every exit path, cancellation included.
    releases: Vec<ReleaseOnDrop<St>>,
    /// Keeps the keys held so far while the call waits for the next group (Redis Cluster),
    /// then while the request runs; started with the first group taken.
    renewal: Option<Renewal>,
    /// The keys the renewal extends: those held so far.
    renewed: Arc<Mutex<Vec<LockKey>>>,
    /// When the first group's acquire was sent: the lease runs from there.
    first_sent: Option<Instant>,
    line: SetPlace,
}

impl<St: LockStore> SetAttempts<St> {
    /// The keys of the group the call takes next.
    fn next_group(&self) -> &[LockKey] {
        self.groups.get(self.held).map_or(&[], Vec::as_slice)
    }

    /// The releases of the keys of the group the call takes next.
    fn next_releases(&mut self) -> &mut [ReleaseOnDrop<St>] {
        let start: usize = self.groups[..self.held].iter().map(Vec::len).sum();
        let end = start + self.next_group().len();
        &mut self.releases[start..end]
    }

    /// Gives back the groups held (their renewal gave up): the call starts over.
    async fn give_back_held(&mut self) {
        let held: usize = self.groups[..self.held].iter().map(Vec::len).sum();
        // The call waits for these keys again, and looks at them as it meets them.
        let _gone = release_all(&mut self.releases[..held], None).await;
        self.held = 0;
        self.fences.clear();
        self.renewal = None;
        self.first_sent = None;
        self.renewed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

/// The set taken: when its first acquire was sent (the lease runs from there).
pub struct SetAcquired {
    at: Instant,
}

impl<S, Req, St, X, Strat> Contended<S, Req> for LockSetLayer<St, X, Strat>
where
    S: SendHandler<Req>,
    Req: Send + 'static,
    St: LockSetStore,
    X: KeySetExtractor<Req> + Send + Sync + 'static,
    Strat: ConflictStrategy<Req>,
{
    type Over = OverHandler;
    type Key = Vec<LockKey>;
    type Strategy = Strat;
    type Attempts = SetAttempts<St>;
    type Holding = SetAcquired;

    fn key(&self, request: &Req) -> Result<Option<Vec<LockKey>>, KeyError> {
        let Some(names) = self.lock.extractor.lock_keys(request) else {
            return Ok(None);
        };
        let mut keys = names
            .into_iter()
            .map(LockKey::new)
            .collect::<Result<Vec<_>, _>>()?;
        // One order for every set: the store's groups and the holdings follow it.
        keys.sort_unstable();
        keys.dedup();
        if keys.len() > MAX_SET_KEYS {
            return Err(KeyError::TooManyKeys {
                count: keys.len(),
                max: MAX_SET_KEYS,
            });
        }
        if keys.is_empty() {
            return Err(KeyError::EmptySet);
        }
        Ok(Some(keys))
    }

    fn strategy(&self) -> &Strat {
        &self.lock.strategy
    }

    /// The whole set: requests for one set share a waiting job under `Coalesce`, requests for
    /// sets that only share the key met do not.
    fn waits_for(&self, keys: &Vec<LockKey>, _: &LockKey) -> LockKey {
        set_name(keys)
    }

    fn span(&self, keys: &Vec<LockKey>) -> tracing::Span {
        tracing::debug_span!("redefer.lock_set", keys = ?keys.iter().map(LockKey::as_str).collect::<Vec<_>>())
    }

    fn count_conflict(&self, decision: &'static str) {
        metric_names::conflict(decision);
    }

    fn start<E>(&self, keys: &Vec<LockKey>) -> Result<SetAttempts<St>, Error<E>> {
        let space = LockSpace {
            store: self.lock.store.instance(),
            permits: false,
        };
        // A call under its own caller's holding of one of its keys would wait for itself.
        if let Some(key) = keys.iter().find(|key| held_by_caller(space, key)) {
            return Err(Error::HeldByCaller { key: key.clone() });
        }
        Ok(SetAttempts {
            space,
            caller: Caller::new(),
            groups: Vec::new(),
            held: 0,
            fences: Vec::with_capacity(keys.len()),
            releases: Vec::new(),
            renewal: None,
            renewed: Arc::default(),
            first_sent: None,
            line: SetPlace::default(),
        })
    }

    async fn attempt(
        &self,
        keys: &Vec<LockKey>,
        attempts: &mut SetAttempts<St>,
    ) -> Result<Attempt<SetAcquired>, StoreError> {
        if attempts.groups.is_empty() {
            attempts.groups = self.lock.store.groups(keys.clone()).await?;
            attempts.releases = attempts
                .groups
                .iter()
                .flatten()
                .map(|key| {
                    ReleaseOnDrop::new(
                        self.lock.store.clone(),
                        key.clone(),
                        attempts.caller.token,
                        self.lock.ttl,
                    )
                })
                .collect();
        }
        while attempts.held < attempts.groups.len() {
            let sent = Instant::now();
            attempts.next_releases().iter_mut().for_each(ReleaseOnDrop::arm);
            let me = attempts.line.place.as_ref().or(attempts.caller.job.as_ref());
            // An error leaves the releases armed: not knowing whether the acquire took effect,
            // they release by token on their way out (and leave the lines).
            let acquisition = self
                .lock
                .store
                .acquire_set(
                    attempts.next_group(),
                    attempts.caller.token,
                    self.lock.ttl,
                    me,
                    self.lock.fencing,
                )
                .await?;
            let blocked = match acquisition {
                SetAcquisition::Acquired(fences) => {
                    self.took_group(attempts, fences, sent);
                    continue;
                }
                SetAcquisition::Held(blocked) => blocked,
            };
            attempts
                .next_releases()
                .iter_mut()
                .for_each(ReleaseOnDrop::disarm);
            return Ok(self.conflict(attempts, blocked));
        }
        Ok(Attempt::Taken(SetAcquired {
            at: attempts.first_sent.unwrap_or_else(Instant::now),
        }))
    }

    async fn wait(
        &self,
        _: &Vec<LockKey>,
        attempts: &mut SetAttempts<St>,
        delay: Duration,
    ) -> Result<Woken, StoreError> {
        let me = attempts.caller.waiter();
        let group = attempts.next_group().to_vec();
        // Set before joining: a call cancelled as it joins leaves the lines all the same.
        for release in attempts.next_releases() {
            release.waiting_as(Some(me.clone()));
        }
        attempts
            .line
            .join(&self.lock.store, attempts.held, &group, me)
            .await?;
        let runs_out_at = attempts.caller.holder_runs_out_at();
        let reservation = self.lock.store.reservation();
        attempts
            .line
            .watch_for_expiry(&self.lock.expiries, reservation, runs_out_at);
        let SetAttempts { line, renewal, .. } = attempts;
        let (woken, lost) = match renewal.as_mut() {
            // Groups held while waiting for the next: their renewal may give up meanwhile.
            Some(renewal) => tokio::select! {
                woken = line.wait_turn(delay) => (woken, None),
                lost = renewal => (Woken::Timer, Some(lost)),
            },
            None => (line.wait_turn(delay).await, None),
        };
        if let Some(lost) = lost {
            tracing::warn!(
                ?lost,
                "the keys held while waiting for the rest were lost; starting over"
            );
            // Out of the lines of the group it waited for: it comes back to them in slot order.
            attempts.line.leave(&self.lock.store, &group).await;
            for release in attempts.next_releases() {
                release.waiting_as(None);
            }
            attempts.give_back_held().await;
        }
        Ok(woken)
    }

    async fn stop_trying(
        &self,
        _: &Vec<LockKey>,
        attempts: &mut SetAttempts<St>,
        decision: Option<&Decision>,
    ) -> Result<(), StoreError> {
        let group = attempts.next_group().to_vec();
        let place = attempts.line.place.clone();
        let kept = match (decision, &attempts.caller.job) {
            // A job waits in line: its scheduler puts it back to wait for its turn.
            (Some(Decision::Reject { .. } | Decision::BackToQueue { .. }), Some(me)) => {
                attempts.caller.tell_job_of_holder();
                self.lock
                    .store
                    .join_set_line(&group, me, place.as_ref(), None)
                    .await?;
                true
            }
            (Some(Decision::Deferred(deferred)), _) => match &deferred.queue {
                // The strategy put it in line (in the caller's place, if it had one).
                Some(_) if deferred.in_line => true,
                // The job takes the caller's place in every line, or the end of each.
                Some(queue) => {
                    let job = Waiter::job(queue, &deferred.job_id);
                    match self
                        .lock
                        .store
                        .join_set_line(&group, &job, place.as_ref(), None)
                        .await
                    {
                        Ok(_) => true,
                        Err(error) => {
                            // Stored, but not in line: it runs at its fallback due time.
                            tracing::warn!(%error, "the deferred job could not join the lines");
                            false
                        }
                    }
                }
                None => false,
            },
            // A caller that stops waiting must not hold up the others.
            _ => false,
        };
        if !kept {
            attempts.line.leave(&self.lock.store, &group).await;
        }
        for release in attempts.next_releases() {
            release.waiting_as(None);
        }
        Ok(())
    }

    fn refused<E>(&self, key: LockKey, _: &SetAttempts<St>, retry_after: Option<Duration>) -> Error<E> {
        Error::Locked { key, retry_after }
    }

    async fn run(
        &self,
        keys: Vec<LockKey>,
        mut attempts: SetAttempts<St>,
        acquired: SetAcquired,
        inner: S,
        request: Req,
    ) -> CallResult<S, Req, OverHandler> {
        ::metrics::counter!(metric_names::LOCK_ACQUIRED).increment(1);
        let held_keys: Vec<LockKey> = attempts.groups.iter().flatten().cloned().collect();
        // Under a strategy that supersedes, holders hear newer requests that want a key.
        let stops: Vec<Option<StopListener>> = held_keys
            .iter()
            .map(|key| {
                self.lock
                    .strategy
                    .supersedes()
                    .then(|| StopListener::start(&self.lock.store, key, attempts.caller.waiter()))
            })
            .collect();
        let renewal = match attempts.renewal.take() {
            Some(renewal) => renewal,
            None => self.renewal(&attempts, acquired.at),
        };
        let space = attempts.space;
        let holdings = |lease: &Arc<Lease>| {
            held_keys
                .iter()
                .zip(&attempts.fences)
                .zip(&stops)
                .map(|((key, fence), stop)| {
                    let stop = stop.as_ref().map(StopListener::signal).unwrap_or_default();
                    HeldLock::new(key.clone(), *fence, stop, space, Arc::clone(lease))
                })
                .collect()
        };
        let finished = match run_renewed(renewal, holdings, inner, request).await {
            Ok(finished) => finished,
            Err(lost) => {
                ::metrics::counter!(metric_names::LOCK_LOST).increment(1);
                // The handler's future is dropped: it stops here. The releases, still armed,
                // release by token in the background.
                // A set is never empty: the guard passes a request without keys unlocked.
                let key = keys[0].clone();
                return Err(Error::LockLost { key, reason: lost });
            }
        };
        let held_for = hold_ended(&self.lock.holds, acquired.at);
        for gone in release_all(&mut attempts.releases, held_for).await {
            // Nobody was handed the key: whoever waits for it here looks.
            self.lock.expiries.look_now(&gone, false);
        }
        match finished {
            Ok(result) => result,
            Err(panic) => resume_unwind(panic),
        }
    }
}

impl<St: LockSetStore, X, Strat> LockSetLayer<St, X, Strat> {
    /// Notes the group the call took: its keys are held from now on, and renewed.
    fn took_group(&self, attempts: &mut SetAttempts<St>, fences: Vec<Option<FencingToken>>, sent: Instant) {
        attempts
            .next_releases()
            .iter_mut()
            .for_each(ReleaseOnDrop::holding);
        if attempts.line.group == attempts.held {
            // Taking the keys took the call out of their lines.
            attempts.line.left();
            for release in attempts.next_releases() {
                release.waiting_as(None);
            }
        }
        attempts
            .renewed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(attempts.next_group().iter().cloned());
        attempts.fences.extend(fences);
        attempts.held += 1;
        if attempts.first_sent.is_none() {
            attempts.first_sent = Some(sent);
        }
        // More groups to take (Redis Cluster): the ones held are renewed while the call waits.
        if attempts.held < attempts.groups.len() && attempts.renewal.is_none() {
            attempts.renewal = Some(self.renewal(attempts, sent));
        }
    }

    /// The renewal of the keys the call holds, from a lease granted at `granted_at`.
    fn renewal(&self, attempts: &SetAttempts<St>, granted_at: Instant) -> Renewal {
        let (store, renewed, token, ttl) = (
            self.lock.store.clone(),
            Arc::clone(&attempts.renewed),
            attempts.caller.token,
            self.lock.ttl,
        );
        Renewal::start("lock set", ttl, granted_at, move || {
            let keys = renewed.lock().unwrap_or_else(PoisonError::into_inner).clone();
            let store = store.clone();
            async move {
                let extended = try_join_all(
                    keys.iter()
                        .map(|key| store.extend_holding(key, token, ttl, Holders::One)),
                )
                .await?;
                Ok::<_, StoreError>(extended.into_iter().all(|held| held))
            }
        })
    }

    /// The conflict of an attempt that found `blocked` keys of the next group taken: the key
    /// that keeps the call waiting longest names it.
    fn conflict(&self, attempts: &mut SetAttempts<St>, blocked: Vec<HeldKey>) -> Attempt<SetAcquired> {
        let typical = self.lock.holds.typical();
        let wait = |held: &HeldKey| {
            estimate_wait(
                held.remaining,
                held.ahead,
                held.typical_hold.or(typical),
                self.lock.ttl,
            )
        };
        let slowest = blocked
            .into_iter()
            .max_by_key(|held| wait(held))
            .unwrap_or(HeldKey {
                index: 0,
                remaining: None,
                ahead: 0,
                typical_hold: None,
                reserved: false,
            });
        ::metrics::gauge!(metric_names::LOCK_WAITERS).set(slowest.ahead as f64);
        attempts
            .caller
            .met(slowest.remaining, slowest.reserved, slowest.ahead);
        let group = attempts.next_group().to_vec();
        // A group is never empty (a set has a key, and a store's groups hold every key).
        let at = group[slowest.index.min(group.len() - 1)].clone();
        attempts.line.blocked_by = Some(at.clone());
        let line = set_line_of(
            self.lock.store.clone(),
            group,
            attempts.line.place.clone(),
            attempts.caller.waiter(),
        );
        Attempt::Met {
            at,
            retry_after: wait(&slowest),
            kind: ConflictKind::Held(HeldConflict {
                remaining: slowest.remaining,
                reserved: slowest.reserved,
                ahead: slowest.ahead,
                line,
            }),
        }
    }
}

/// A call's place in the lines of the group it waits for, while it waits in place (the
/// `Retry` strategy).
#[derive(Default)]
struct SetPlace {
    /// The group whose lines the call is in.
    group: usize,
    place: Option<Waiter>,
    /// The handoffs of each key of that group.
    handoffs: Vec<Handoffs>,
    /// The key of the group whose holder the last conflict met (the one that keeps the call
    /// waiting longest).
    blocked_by: Option<LockKey>,
    /// The call's part in that key's watch, while it waits in place.
    watch: Option<Watching>,
}

impl SetPlace {
    /// Joins the lines of `keys`, the set's `group`-th group, as `me`, once: later retries keep
    /// the place.
    async fn join<St: LockSetStore>(
        &mut self,
        store: &St,
        group: usize,
        keys: &[LockKey],
        me: Waiter,
    ) -> Result<(), StoreError> {
        if self.place.is_some() && self.group == group {
            return Ok(());
        }
        // Listen before joining: a key may be handed to us as we join.
        self.handoffs = keys
            .iter()
            .map(|key| store.line_handoffs(key, Holders::One))
            .collect();
        join_all(
            self.handoffs
                .iter_mut()
                .map(|handoffs| handoffs.listening(LISTEN_WITHIN)),
        )
        .await;
        self.group = group;
        store.join_set_line(keys, &me, None, None).await?;
        self.place = Some(me);
        Ok(())
    }

    /// The call took the keys of its group, which took it out of their lines.
    fn left(&mut self) {
        self.place = None;
        self.handoffs.clear();
        self.watch = None;
    }

    /// Watches the key that keeps the call waiting in `watches` while it waits in place,
    /// telling the watch when the holder the call met runs out (`runs_out_at`); a key handed
    /// over is reserved for `reservation`.
    fn watch_for_expiry(
        &mut self,
        watches: &Arc<ExpiryWatches>,
        reservation: Duration,
        runs_out_at: Option<Instant>,
    ) {
        let Some(key) = &self.blocked_by else { return };
        if self.watch.as_ref().is_none_or(|watch| watch.key() != key) {
            self.watch = Some(watches.watch(key, false, reservation));
        }
        if let (Some(watch), Some(at)) = (&self.watch, runs_out_at) {
            watch.runs_out_at(at);
        }
    }

    /// Waits until a key of the group is handed to us, or it is our turn to look at the key
    /// that keeps us waiting (its holder ran out), or `delay` passes (the fallback poll).
    async fn wait_turn(&mut self, delay: Duration) -> Woken {
        wait_for_turn(
            &mut self.handoffs,
            self.place.as_ref(),
            self.watch.as_ref(),
            delay,
        )
        .await
    }

    /// Leaves the lines of `keys`, if in them: a call that stops waiting must not hold up the
    /// others.
    async fn leave<St: LockSetStore>(&mut self, store: &St, keys: &[LockKey]) {
        self.watch = None;
        let Some(me) = self.place.take() else { return };
        self.handoffs.clear();
        if let Err(error) = store.leave_set_line(keys, &me).await {
            tracing::warn!(%error, "cannot leave the lines; the reservations for us will run out");
        }
    }
}

/// Releases a set's keys together, awaited: each release is on the connection before the next
/// is written (the first poll of each sends it), and their answers come back in one round trip.
/// Returns the keys the store found no longer ours: their releases handed them to nobody.
async fn release_all<St: LockStore>(
    releases: &mut [ReleaseOnDrop<St>],
    held_for: Option<Duration>,
) -> Vec<LockKey> {
    let released = join_all(releases.iter_mut().map(|release| release.release(held_for))).await;
    releases
        .iter()
        .zip(released)
        .filter(|(_, ours)| !ours)
        .map(|(release, _)| release.key().clone())
        .collect()
}
