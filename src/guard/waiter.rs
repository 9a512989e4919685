//! A place in a key's line: the requests waiting for a held lock, served in arrival order.

use std::fmt;

use crate::queue::{JobId, QueueName};
use crate::token::LockToken;

/// One place in the line of a held lock key: a deferred job, or a caller that waits in place
/// (the [`Retry`](crate::strategy::Retry) strategy). When the holder releases the key, it is
/// reserved for the first in line, whose job is made due at once or whose caller is told.
///
/// ```
/// use redefer::LockToken;
/// use redefer::guard::Waiter;
/// use redefer::queue::{JobId, QueueName};
///
/// let job = Waiter::job(&QueueName::new("orders")?, &JobId::new("webhook-7")?);
/// assert_eq!(job.as_str(), "j|webhook-7|orders");
/// assert_eq!(job.as_job(), Some((JobId::new("webhook-7")?, QueueName::new("orders")?)));
/// assert!(Waiter::caller(LockToken::random()).as_job().is_none());
/// # Ok::<(), redefer::KeyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Waiter(String);

impl Waiter {
    /// The job `id` of the (physical) queue `queue`: `j|<id>|<queue>` (a job id holds no `|`).
    pub fn job(queue: &QueueName, id: &JobId) -> Self {
        Waiter(format!("j|{id}|{queue}"))
    }

    /// A caller holding `token` while it waits: `c|<token>`.
    pub fn caller(token: LockToken) -> Self {
        let hex = token.to_hex();
        Waiter(format!("c|{}", String::from_utf8_lossy(&hex)))
    }

    /// A waiter as a store holds it; `None` for the empty text, which no waiter is.
    pub(crate) fn from_stored(text: String) -> Option<Self> {
        (!text.is_empty()).then_some(Waiter(text))
    }

    /// The waiter as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The job and its queue, for a job waiter.
    pub fn as_job(&self) -> Option<(JobId, QueueName)> {
        let (id, queue) = self.0.strip_prefix("j|")?.split_once('|')?;
        Some((JobId::new(id).ok()?, QueueName::new(queue).ok()?))
    }
}

impl fmt::Debug for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
