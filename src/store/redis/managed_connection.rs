//! The connection [`RedisStore::connect`](super::RedisStore::connect) makes: redis-rs's
//! [`ConnectionManager`], given up for a new one when its server stops answering on it.
//!
//! redis-rs's manager reconnects when its connection is closed or a reply does not parse, not
//! when commands time out (it takes a timeout for a slow server). A connection whose server
//! vanished without a reset (its host gone in a failover to another host behind the same
//! name, the connection's state dropped by a firewall or NAT) then times out every command
//! until the operating system gives the socket up (about 15 minutes with Linux's defaults, and
//! never while something still acknowledges the bytes): no lock renewed, no job claimed,
//! though the server may be reachable again on a new connection. Here a connection on which
//! commands timed out twice in a row, with no reply between, is replaced by a new one.
//!
//! Why two: one command may time out on a connection that still answers the others (a slow
//! script, a large listing); two in a row with no reply between means the connection answered
//! nothing for a whole response timeout. Replacing a connection to a server that is merely
//! stalled costs one reconnection: the commands in flight on the old one time out as they
//! would have.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// How many commands must time out in a row on one connection, with no reply between, before
/// it is replaced (see the module's header).
const TIMEOUTS_BEFORE_REPLACING: u32 = 2;

/// A connection to one Redis server that reconnects by itself: redis-rs's
/// [`ConnectionManager`] (which reconnects after the server closed the connection), replaced
/// by a new one when commands time out twice in a row on it (a server that went silent). What
/// [`RedisStore::connect`](super::RedisStore::connect) and
/// [`RedisStoreBuilder::connect`](super::RedisStoreBuilder::connect) connect over; cloned per
/// command, as cheaply as the manager.
///
/// ```no_run
/// use redefer::RedisStore;
/// use redefer::store::ManagedConnection;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), redefer::StoreError> {
/// let store: RedisStore<ManagedConnection> = RedisStore::connect("redis://127.0.0.1:6379").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ManagedConnection {
    /// The manager this handle sends on: the shared one as it stood when this handle last
    /// looked (a handle is cloned per command, so it looks again at nearly every command).
    manager: ConnectionManager,
    /// Which of the shared connection's managers `manager` is.
    generation: u64,
    shared: Arc<Shared>,
}

/// What the clones of one [`ManagedConnection`] share.
struct Shared {
    /// Where a replacement connects, and how.
    client: redis::Client,
    config: ConnectionManagerConfig,
    /// The manager commands go to now, and its generation (one more at each replacement).
    current: Mutex<(u64, ConnectionManager)>,
    /// The generation of `current`, read without its lock by every command.
    generation: AtomicU64,
    /// The commands of the current manager that timed out since its last reply.
    timeouts_in_a_row: AtomicU32,
}

impl ManagedConnection {
    /// Connects to `client`'s server (failing as the manager does when it cannot).
    pub(crate) async fn connect(client: redis::Client, config: ConnectionManagerConfig) -> RedisResult<Self> {
        let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        Ok(ManagedConnection {
            manager: manager.clone(),
            generation: 0,
            shared: Arc::new(Shared {
                client,
                config,
                current: Mutex::new((0, manager)),
                generation: AtomicU64::new(0),
                timeouts_in_a_row: AtomicU32::new(0),
            }),
        })
    }

    /// Takes up the shared manager when it was replaced since this handle last looked.
    fn take_up_current(&mut self) {
        if self.shared.generation.load(Ordering::Acquire) != self.generation {
            let current = self.shared.current.lock().unwrap_or_else(PoisonError::into_inner);
            (self.generation, self.manager) = (current.0, current.1.clone());
        }
    }
}

impl Shared {
    /// Counts how a command sent on generation `generation` ended, and replaces that
    /// generation's manager when it answered nothing for too long.
    fn heard<T>(&self, generation: u64, result: &RedisResult<T>) {
        if generation != self.generation.load(Ordering::Acquire) {
            // A late word from a manager already replaced: it says nothing of the current one.
            return;
        }
        match result {
            Err(error) if error.is_timeout() => {
                let in_a_row = self.timeouts_in_a_row.fetch_add(1, Ordering::AcqRel) + 1;
                if in_a_row >= TIMEOUTS_BEFORE_REPLACING {
                    self.replace(generation);
                }
            }
            // An answer (a server's error is one too): the connection is alive. Read before it
            // is written, so that the common case does not write a line every core reads.
            _ => {
                if self.timeouts_in_a_row.load(Ordering::Relaxed) != 0 {
                    self.timeouts_in_a_row.store(0, Ordering::Relaxed);
                }
            }
        }
    }

    /// Replaces generation `silent`'s manager by a new one, unless another command did.
    fn replace(&self, silent: u64) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.0 != silent {
            return;
        }
        // Lazy: it connects at its first command, so that no caller waits here.
        match ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone()) {
            Ok(manager) => {
                *current = (silent + 1, manager);
                self.timeouts_in_a_row.store(0, Ordering::Relaxed);
                self.generation.store(silent + 1, Ordering::Release);
                tracing::warn!(
                    timeouts = TIMEOUTS_BEFORE_REPLACING,
                    "Redis answered nothing on its connection; connecting anew"
                );
            }
            Err(error) => {
                tracing::warn!(%error, "Redis answered nothing on its connection; connecting anew failed")
            }
        }
    }
}

impl ConnectionLike for ManagedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.take_up_current();
        // One box, as the manager's own `ConnectionLike` makes: its inherent method is awaited
        // here, not its boxed future.
        Box::pin(async move {
            let result = self.manager.send_packed_command(cmd).await;
            self.shared.heard(self.generation, &result);
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.take_up_current();
        Box::pin(async move {
            let result = self.manager.send_packed_commands(pipeline, offset, count).await;
            self.shared.heard(self.generation, &result);
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.manager.get_db()
    }
}
