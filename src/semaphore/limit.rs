//! How many permits a key has: one number for every key, or a function of the key.

use crate::key::LockKey;

/// How many holders a key may have at once: a `u32` for every key, or a closure of the key
/// (for example by customer tier).
///
/// The limit is asked at each acquire, release and change of the line, so it may change while
/// the key is held: holders above a lowered limit finish, and nobody new enters until fewer
/// than the limit hold it. A limit of 0 closes the key: a request is refused with
/// [`Error::Closed`](crate::Error::Closed) whatever its strategy (nothing is stored), and a job
/// that meets it goes back to wait for it to open, using no attempt (within its
/// `max_lock_wait`). A fixed limit is at least 1 ([`permits`](crate::LockLayer::permits) and
/// `[lock] permits` refuse 0): only a closure closes keys, for as long as it says 0.
///
/// ```
/// use redefer::LockKey;
/// use redefer::semaphore::PermitLimit;
///
/// let by_tier = |key: &LockKey| if key.as_str().starts_with("gold:") { 8 } else { 2 };
/// assert_eq!(by_tier.permits(&LockKey::new("gold:acme")?), 8);
/// assert_eq!(3.permits(&LockKey::new("any")?), 3);
/// # Ok::<(), redefer::KeyError>(())
/// ```
pub trait PermitLimit: Send + Sync + 'static {
    /// How many may hold `key` at once.
    fn permits(&self, key: &LockKey) -> u32;
}

impl PermitLimit for u32 {
    fn permits(&self, _key: &LockKey) -> u32 {
        *self
    }
}

impl<F> PermitLimit for F
where
    F: Fn(&LockKey) -> u32 + Send + Sync + 'static,
{
    fn permits(&self, key: &LockKey) -> u32 {
        self(key)
    }
}
