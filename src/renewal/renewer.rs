//! The renewal of a lease, or of the leases one request was granted together (the jobs of one
//! claim): registered with the watchdog when granted, run as a task of its own from the first
//! extension on.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::runtime::Handle;
use tokio::time::{Instant, sleep_until, timeout_at};

use super::lease::{Lease, LossReason};
use super::watchdog::{self, Watched};

/// Keeps one lease alive while its holder works: extends it every third of its TTL from a task
/// of its own, so that a holder blocking its thread keeps its lease.
///
/// As a future, it resolves when the renewal gave up (the holder must stop then); dropping it
/// (the holder is done, on any path) stops the renewal.
pub(crate) struct Renewal {
    ends_lease: EndOnDrop,
    // Starts the renewal from the watchdog's thread when the first extension is due. Not a
    // tokio timer: one costs a registration with the runtime's timer wheel and its removal on
    // every request, most of which end long before; and a task spawned from the watchdog's
    // thread is taken by any worker, where one spawned by the holder's task would wait in its
    // worker's next-task slot, which other workers never steal from, behind a holder that
    // blocks that worker.
    _registered: Registered,
}

/// The watchdog's registration that starts a renewal: the lease's own, or one for the leases
/// granted together, withdrawn when the last of them is done.
enum Registered {
    Alone { _watched: Watched },
    Together { _watched: Arc<Watched> },
}

impl Renewal {
    /// Arms the renewal of a lease taken by a request sent at `granted_at`, for `ttl`, that
    /// `extend` extends by `ttl` from now (`Ok(false)`: the lease is gone). `what` names the
    /// lease in logs.
    ///
    /// Call it from within a tokio runtime: the renewal runs on that runtime.
    pub(crate) fn start<F, Fut, E>(
        what: &'static str,
        ttl: Duration,
        granted_at: Instant,
        mut extend: F,
    ) -> Self
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<bool, E>> + Send + 'static,
        E: std::fmt::Display + Send,
    {
        let lease = Arc::new(Lease::granted(granted_at, ttl));
        let start = Start::waker([Arc::clone(&lease)], what, ttl, move |_| extend());
        Renewal {
            ends_lease: EndOnDrop(lease),
            _registered: Registered::Alone {
                _watched: watchdog::wake_at(first_extension(granted_at, ttl), start),
            },
        }
    }

    /// Arms the renewals of `count` leases granted together by a request sent at `granted_at`,
    /// for `ttl` (the jobs of one claim): one registration for them all, where one each cost
    /// every job an insert and a removal in the watchdog's map. `extend(i)` extends the `i`th;
    /// each is extended, and lost, on its own.
    pub(crate) fn start_together<F, Fut, E>(
        what: &'static str,
        ttl: Duration,
        granted_at: Instant,
        count: usize,
        extend: F,
    ) -> Vec<Self>
    where
        F: FnMut(usize) -> Fut + Send + 'static,
        Fut: Future<Output = Result<bool, E>> + Send + 'static,
        E: std::fmt::Display + Send,
    {
        let leases: Vec<Arc<Lease>> = (0..count)
            .map(|_| Arc::new(Lease::granted(granted_at, ttl)))
            .collect();
        let start = Start::waker(leases.clone(), what, ttl, extend);
        let registered = Arc::new(watchdog::wake_at(first_extension(granted_at, ttl), start));
        leases
            .into_iter()
            .map(|lease| Renewal {
                ends_lease: EndOnDrop(lease),
                _registered: Registered::Together {
                    _watched: Arc::clone(&registered),
                },
            })
            .collect()
    }

    /// The lease, for [`while_valid`](super::while_valid).
    pub(crate) fn lease(&self) -> Arc<Lease> {
        Arc::clone(&self.ends_lease.0)
    }
}

impl Future for Renewal {
    type Output = LossReason;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<LossReason> {
        self.ends_lease.0.poll_lost(cx)
    }
}

/// When a lease granted at `granted_at` for `ttl` is first extended: a third of the way.
fn first_extension(granted_at: Instant, ttl: Duration) -> std::time::Instant {
    (granted_at + ttl / 3).into_std()
}

/// Ends the lease when the holder is done, however it ends.
struct EndOnDrop(Arc<Lease>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// Starts the renewal task when woken: the first extension is due.
struct Start<L, F> {
    leases: L,
    what: &'static str,
    ttl: Duration,
    runtime: Handle,
    /// Taken by the first wake: the renewal starts once.
    extend: Mutex<Option<F>>,
}

impl<L, F> Start<L, F> {
    fn waker(leases: L, what: &'static str, ttl: Duration, extend: F) -> Waker
    where
        Self: Wake + Send + Sync + 'static,
    {
        Waker::from(Arc::new(Start {
            leases,
            what,
            ttl,
            runtime: Handle::current(),
            extend: Mutex::new(Some(extend)),
        }))
    }
}

impl<L, F, Fut, E> Wake for Start<L, F>
where
    L: AsRef<[Arc<Lease>]> + Clone + Send + Sync + 'static,
    F: FnMut(usize) -> Fut + Send + 'static,
    Fut: Future<Output = Result<bool, E>> + Send + 'static,
    E: std::fmt::Display + Send,
{
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let extend = self.extend.lock().unwrap_or_else(PoisonError::into_inner).take();
        let Some(extend) = extend else { return };
        if !self.leases.as_ref().iter().any(|lease| lease.is_live()) {
            return;
        }
        let leases = self.leases.clone();
        let (what, ttl) = (self.what, self.ttl);
        // A runtime shut down meanwhile drops the task: its holders are gone too.
        drop(self.runtime.spawn(async move {
            let leases = leases.as_ref();
            tokio::select! {
                biased;
                () = all_over(leases) => {}
                () = renew_while_live(what, ttl, leases, extend) => {}
            }
        }));
    }
}

/// Resolves once no lease of `leases` is live: their holders are done (or lost them).
async fn all_over(leases: &[Arc<Lease>]) {
    std::future::poll_fn(|cx| {
        let mut over = Poll::Ready(());
        for lease in leases {
            if lease.poll_over(cx).is_pending() {
                over = Poll::Pending;
            }
        }
        over
    })
    .await
}

/// Extends every live lease of `leases` (`extend(i)` the `i`th) every third of `ttl`, until
/// none is live.
///
/// A failed extension is retried until the TTL would have run out, then the lease counts as
/// lost: the work must not go on past a lease that may have expired. The leases were granted
/// together: they are extended together, each lost on its own.
async fn renew_while_live<F, Fut, E>(what: &str, ttl: Duration, leases: &[Arc<Lease>], mut extend: F)
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<bool, E>>,
    E: std::fmt::Display,
{
    let period = ttl / 3;
    let retry_gap = (ttl / 10).max(Duration::from_millis(1));
    let Some(first) = leases.first() else { return };
    let mut next = first.valid_until() - ttl + period;
    loop {
        sleep_until(next).await;
        let sent = Instant::now();
        let live: Vec<usize> = (0..leases.len()).filter(|&i| leases[i].is_live()).collect();
        let answers = join_all(
            live.iter()
                .map(|&i| timeout_at(leases[i].valid_until(), extend(i)))
                .collect::<Vec<_>>(),
        )
        .await;
        // The next round: a period after a confirmation, sooner for a failure to retry.
        let mut next_round: Option<Instant> = None;
        for (&i, answer) in live.iter().zip(answers) {
            let lease = &leases[i];
            let again_at = match answer {
                Ok(Ok(true)) => {
                    tracing::trace!(what, "renewed");
                    lease.confirmed_until(sent + ttl);
                    sent + period
                }
                Ok(Ok(false)) => {
                    if lease.lose(LossReason::Gone) {
                        tracing::warn!(what, "lost: another holder has it or it was deleted");
                    }
                    continue;
                }
                Ok(Err(error)) => {
                    tracing::warn!(what, %error, "renewal failed; retrying until the TTL runs out");
                    (Instant::now() + retry_gap).min(lease.valid_until())
                }
                Err(_deadline) => {
                    if lease.lose(LossReason::Unconfirmed) {
                        tracing::warn!(what, "lost: no renewal confirmed before the TTL ran out");
                    }
                    continue;
                }
            };
            next_round = Some(next_round.map_or(again_at, |at| at.min(again_at)));
        }
        match next_round {
            Some(at) => next = at,
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::mpsc;
    use tokio::time::{Instant, timeout};

    use super::{LossReason, Renewal};

    /// Leases granted together are renewed together and lost one by one: the one the store no
    /// longer holds stops its holder, the others go on; one whose holder is done is no longer
    /// extended; and the renewal stops once every holder is done.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn leases_granted_together_are_each_extended_and_lost_on_their_own() {
        let (extended, mut extensions) = mpsc::unbounded_channel();
        let renewals =
            Renewal::start_together("test", Duration::from_millis(300), Instant::now(), 3, move |i| {
                let _ = extended.send(i);
                // The store holds every lease but the second.
                async move { Ok::<_, String>(i != 1) }
            });
        let [first, second, third]: [Renewal; 3] = renewals.try_into().ok().expect("three renewals");
        let within = Duration::from_secs(10);
        assert_eq!(timeout(within, second).await, Ok(LossReason::Gone));
        assert!(first.lease().is_live() && third.lease().is_live());

        // Two more rounds of the other two, and never the lost one again.
        let mut seen = [0; 3];
        while seen[0] < 3 || seen[2] < 3 {
            let i = timeout(within, extensions.recv())
                .await
                .expect("renewed")
                .expect("running");
            seen[i] += 1;
        }
        assert_eq!(seen[1], 1, "the lost lease was extended again");
        assert!(first.lease().is_live() && third.lease().is_live());

        // The first's holder is done: at most a round on its way still names it.
        drop(first);
        let mut after = Vec::new();
        while after.iter().filter(|&&i| i == 2).count() < 3 {
            after.push(
                timeout(within, extensions.recv())
                    .await
                    .expect("renewed")
                    .expect("running"),
            );
        }
        assert!(after.iter().filter(|&&i| i == 0).count() <= 1, "{after:?}");
        assert!(after.ends_with(&[2, 2]), "{after:?}");

        // Every holder is done: the renewal stops (and drops what extends).
        drop(third);
        while let Some(i) = timeout(within, extensions.recv())
            .await
            .expect("the renewal stops")
        {
            assert_ne!(i, 1);
        }
    }
}
