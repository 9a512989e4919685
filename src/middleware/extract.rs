//! Which lock a request needs.

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
