//! What the holder of a lease and its renewal share: until when the lease is surely ours, and
//! how it ended.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::time::Instant;

/// Why a lease stopped being ours while its holder worked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The store says another holder has it, or nobody does (expired, deleted).
    Gone,
    /// The store could not confirm an extension before the TTL ran out.
    Unconfirmed,
}

/// The holder works and the renewal extends.
const LIVE: u8 = 0;
/// The holder is done: the renewal stops.
const ENDED: u8 = 1;
/// The renewal gave up: the holder must stop.
const LOST_GONE: u8 = 2;
const LOST_UNCONFIRMED: u8 = 3;

/// One lease as its holder and its renewal see it, from two tasks (and two threads, when the
/// holder blocks its own).
#[derive(Debug)]
pub(crate) struct Lease {
    /// Until when the lease is surely ours, by this process's clock, in nanoseconds after
    /// `base`: the send time of the last request the store confirmed, plus the TTL.
    base: Instant,
    valid_after_base: AtomicU64,
    status: AtomicU8,
    /// The holder's task, woken when the lease is lost.
    holder: AtomicWaker,
    /// The renewal's task, woken when the holder ends.
    renewal: AtomicWaker,
}

impl Lease {
    /// A lease taken by a request sent at `granted_at`, for `ttl`.
    pub(crate) fn granted(granted_at: Instant, ttl: Duration) -> Self {
        let lease = Lease {
            base: granted_at,
            valid_after_base: AtomicU64::new(0),
            status: AtomicU8::new(LIVE),
            holder: AtomicWaker::new(),
            renewal: AtomicWaker::new(),
        };
        lease.confirmed_until(granted_at + ttl);
        lease
    }

    /// Until when the lease is surely ours.
    pub(crate) fn valid_until(&self) -> Instant {
        self.base + Duration::from_nanos(self.valid_after_base.load(Ordering::Acquire))
    }

    /// The store confirmed an extension: the lease is ours until `until`.
    pub(crate) fn confirmed_until(&self, until: Instant) {
        let nanos = u64::try_from(until.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
        self.valid_after_base.store(nanos, Ordering::Release);
    }

    /// The renewal gave up: the holder is told, unless it already ended. Whether the lease
    /// was live until then (a holder that ended meanwhile lost nothing).
    pub(crate) fn lose(&self, reason: LossReason) -> bool {
        let lost = match reason {
            LossReason::Gone => LOST_GONE,
            LossReason::Unconfirmed => LOST_UNCONFIRMED,
        };
        let was_live = self
            .status
            .compare_exchange(LIVE, lost, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if was_live {
            self.holder.wake();
        }
        was_live
    }

    /// The holder is done: the renewal stops.
    pub(crate) fn end(&self) {
        if self
            .status
            .compare_exchange(LIVE, ENDED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.renewal.wake();
        }
    }

    /// Why the lease was lost, if the renewal gave up.
    pub(crate) fn lost(&self) -> Option<LossReason> {
        match self.status.load(Ordering::Acquire) {
            LOST_GONE => Some(LossReason::Gone),
            LOST_UNCONFIRMED => Some(LossReason::Unconfirmed),
            _ => None,
        }
    }

    /// Whether the holder still works and the renewal extends.
    pub(crate) fn is_live(&self) -> bool {
        self.status.load(Ordering::Acquire) == LIVE
    }

    /// Ready with the reason once the renewal gave up; wakes the holder's task then.
    pub(crate) fn poll_lost(&self, cx: &mut Context<'_>) -> Poll<LossReason> {
        self.holder.register(cx.waker());
        match self.lost() {
            Some(reason) => Poll::Ready(reason),
            None => Poll::Pending,
        }
    }

    /// Ready once the lease is no longer live: the holder ended (or it was lost); wakes the
    /// renewal's task then.
    pub(crate) fn poll_over(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.renewal.register(cx.waker());
        if self.is_live() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }
}

/// Runs `work` while `lease` lasts: before each poll, the clock is read, and once the lease may
/// have run out the work is not polled again. A timer alone is not enough: a process resumed
/// after a pause (SIGSTOP, a stalled VM) may poll the work before its timers fire, and must not
/// take another step on a lease that is gone.
pub(crate) async fn while_valid<F: Future>(lease: &Lease, work: F) -> Result<F::Output, LossReason> {
    let mut work = pin!(work);
    std::future::poll_fn(|cx| {
        if Instant::now() >= lease.valid_until() {
            return Poll::Ready(Err(LossReason::Unconfirmed));
        }
        work.as_mut().poll(cx).map(Ok)
    })
    .await
}
