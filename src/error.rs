//! Errors of the store boundary and of input validation.
//!
//! The middleware's own error, which wraps these, lives in [`crate::guard::Error`].

use std::fmt;

use thiserror::Error;

/// A boxed error, as tower uses for errors whose type a layer does not know.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A store operation failed: Redis could not be reached, answered with an error, or answered
/// something this crate does not understand.
///
/// Nothing is lost when a store operation fails: an acquire that fails holds no lock, and a
/// release that fails leaves the lock to expire with its TTL.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Redis returned an error or the connection failed (refused, dropped, timed out).
    #[error("redis: {}", RedisErrorText(.0))]
    Redis(#[from] redis::RedisError),
    /// Fewer replicas than asked acknowledged a new lock in time (see
    /// [`RedisStore::wait_for_replicas`](crate::RedisStore::wait_for_replicas)); the lock was
    /// released.
    #[error("{acked} of {wanted} replicas acknowledged the lock in time")]
    NotReplicated {
        /// How many did.
        acked: u64,
        /// How many were asked for.
        wanted: u32,
    },
    /// Redis answered with a reply of an unexpected shape (a script of another version, or a key
    /// of ours overwritten by another tool).
    #[error("unexpected reply from the store: {0}")]
    Protocol(String),
    /// The server may evict the crate's keys (its `maxmemory-policy` is not `noeviction`), and
    /// the store was built to refuse that (see
    /// [`RedisStoreBuilder::refuse_eviction`](crate::store::RedisStoreBuilder::refuse_eviction)).
    #[error(
        "the server's maxmemory-policy is {policy}: it may evict held locks and accepted jobs; set it to noeviction"
    )]
    EvictionPolicy {
        /// The policy the server reported.
        policy: String,
    },
    /// The address given is not a Redis URL: nothing was tried.
    #[error(
        "{url} is not a Redis URL (redis://[user:password@]host:port[/db], rediss:// with TLS, unix:///path/to/socket): {reason}"
    )]
    InvalidUrl {
        /// The address given, without its password.
        url: String,
        /// What the client said of it.
        reason: String,
    },
}

impl StoreError {
    /// Whether retrying the same operation later may succeed (connection trouble, timeouts,
    /// a server that is loading, failing over or full) rather than repeating the same error.
    pub fn is_transient(&self) -> bool {
        if self.is_out_of_memory() {
            return true; // acks free memory; so does an operator
        }
        match self {
            StoreError::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_cluster_error()
                    || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
                    || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::MasterDown)
            }
            StoreError::NotReplicated { .. } => true,
            StoreError::Protocol(_) | StoreError::EvictionPolicy { .. } | StoreError::InvalidUrl { .. } => {
                false
            }
        }
    }

    /// Whether the server refused the command because it is at its `maxmemory` (with the
    /// `noeviction` policy): nothing was written.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, StoreError::Redis(e) if e.code() == Some("OOM"))
    }

    /// Whether the command may have taken effect although it failed: it was sent, and the
    /// connection dropped or timed out before the reply came. Every other error proves that
    /// nothing was written (the server refused it, or it was never sent).
    pub fn outcome_unknown(&self) -> bool {
        match self {
            StoreError::Redis(e) => {
                !e.is_connection_refusal() && (e.is_io_error() || e.is_timeout() || e.is_connection_dropped())
            }
            _ => false,
        }
    }
}

/// A Redis error as an operator should read it. The server's `WRONGTYPE` means a key redefer
/// reads holds another type than redefer keeps there: another tool's key under the prefix, or
/// one written by hand. The client words it by where it came from (`... script: <sha>, on
/// @user_script:545.`, or `Pipeline failure: [(Index 0, error: ...)]`), which says nothing to
/// the person at the terminal: a script's error is its code and words without that place (a
/// refused fencing counter: `FENCE the fencing counter ... holds ...`); every other error is
/// the client's own text.
struct RedisErrorText<'a>(&'a redis::RedisError);

impl fmt::Display for RedisErrorText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let wrong_type = self
            .0
            .clone()
            .into_server_errors()
            .is_some_and(|errors| errors.iter().any(|(_, error)| error.code() == "WRONGTYPE"));
        if wrong_type {
            f.write_str(
                "a key under the prefix holds another type of value than redefer keeps there \
                 (another tool's key, or one written by hand): WRONGTYPE Operation against a key \
                 holding the wrong kind of value",
            )
        } else if let (Some(code), Some(detail)) = (self.0.code(), self.0.detail())
            && let Some(place) = detail
                .find(" script: ")
                .filter(|at| detail[*at..].contains("@user_script:"))
        {
            write!(f, "{code} {}", &detail[..place])
        } else {
            self.0.fmt(f)
        }
    }
}

/// A lock key, key prefix or queue name was rejected before any Redis call.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is the empty string.
    #[error("{what} must not be empty")]
    Empty {
        /// What was being validated: "lock key", "prefix", "queue name".
        what: &'static str,
    },
    /// The key is longer than the cap.
    #[error("{what} is {len} bytes, over the limit of {max} bytes")]
    TooLong {
        /// What was being validated.
        what: &'static str,
        /// The key's length in bytes.
        len: usize,
        /// The cap in bytes.
        max: usize,
    },
    /// A request asks for more keys at once than a set may hold
    /// ([`LockSetLayer`](crate::lock_set::LockSetLayer)).
    #[error("a set of keys holds at most {max} keys, not {count}")]
    TooManyKeys {
        /// How many keys the request asked for (once each).
        count: usize,
        /// The most a set holds.
        max: usize,
    },
    /// A set's extractor returned `Some` of no keys ([`LockSetLayer`](crate::lock_set::LockSetLayer)):
    /// refused, not run unlocked, since an extractor that lost its keys would otherwise let
    /// every request through. `None` is how an extractor passes a request through unlocked.
    #[error(
        "a set of keys must hold at least one key (an extractor passes a request through unlocked with None)"
    )]
    EmptySet,
    /// A job id has characters other than ASCII letters, digits, `_`, `.` and `-`.
    #[error("job id {id:?} may hold only ASCII letters, digits, '_', '.' and '-'")]
    InvalidJobId {
        /// The rejected id.
        id: String,
    },
    /// A sharded queue was asked for no shards, or too many.
    #[error("a queue has 1 to {max} shards, not {count}")]
    ShardCount {
        /// The count asked for.
        count: usize,
        /// The most shards a queue may have.
        max: usize,
    },
    /// A job group's weight is out of its range ([`JobGroup::weight`](crate::queue::JobGroup::weight)).
    #[error("a job group's weight is 1 to {max}, not {weight}")]
    GroupWeight {
        /// The weight asked for.
        weight: u32,
        /// The largest weight a group may have.
        max: u32,
    },
    /// A prefix contains `{` or `}`, which would move the Redis Cluster hash tag into the prefix
    /// and put every key of a deployment in one slot.
    #[error("prefix {prefix:?} must not contain '{{' or '}}': they would change Redis Cluster hash tags")]
    BraceInPrefix {
        /// The rejected prefix.
        prefix: String,
    },
}
