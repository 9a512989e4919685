//! Which lock a request needs.

use crate::error::KeyError;
use crate::key::LockKey;

/// Maps a request to the key of the lock it must hold, or `None` to pass it through unlocked.
///
/// Implemented for every `Fn(&Req) -> Option<String>`:
///
/// ```
/// use redefer::KeyExtractor;
///
/// struct Transfer { account: u64 }
///
/// let by_account = |t: &Transfer| Some(format!("account:{}", t.account));
/// assert_eq!(by_account.lock_key(&Transfer { account: 7 }).as_deref(), Some("account:7"));
/// ```
pub trait KeyExtractor<Req> {
    /// The lock key for `request`, or `None` when it needs no lock.
    fn lock_key(&self, request: &Req) -> Option<String>;
}

impl<Req, F> KeyExtractor<Req> for F
where
    F: Fn(&Req) -> Option<String>,
{
    fn lock_key(&self, request: &Req) -> Option<String> {
        self(request)
    }
}

/// The checked key of `request`: `None` when it passes unguarded, an error when the extractor's
/// key is not a valid one (no store call is made for it). What every guard asks first.
pub(crate) fn guarded_key<X, Req>(extractor: &X, request: &Req) -> Result<Option<LockKey>, KeyError>
where
    X: KeyExtractor<Req>,
{
    extractor.lock_key(request).map(LockKey::new).transpose()
}
