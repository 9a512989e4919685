//! What the lock layer does when Redis misbehaves: unreachable, killed and restarted, a lock
//! deleted by an operator. Each test runs its own `redis-server`.

use crate::support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redefer::semaphore::Permits;
use redefer::{Error, KeyError, LockLayer, LossReason, RedisStore, StoreError};
use tokio::sync::oneshot;
use tower::{Layer, ServiceExt, service_fn};

use support::Shorthand;
use support::{RedisServer, Server, eventually, for_each_server};

fn by_order(order: &u32) -> Option<String> {
    Some(format!("order:{order}"))
}

/// Sets its flag when dropped: shows that a handler's future was dropped, not left running.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A handler that signals when it starts, then runs until dropped.
fn endless_handler() -> (
    impl tower::Service<u32, Response = (), Error = Infallible, Future = impl Send> + Clone + Send + 'static,
    oneshot::Receiver<()>,
    Arc<AtomicBool>,
) {
    let (entered_tx, entered_rx) = oneshot::channel();
    let entered_tx = Arc::new(std::sync::Mutex::new(Some(entered_tx)));
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let handler = service_fn(move |_: u32| {
        let entered_tx = entered_tx.clone();
        let guard = DropFlag(flag.clone());
        async move {
            let _guard = guard;
            if let Some(tx) = entered_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            std::future::pending::<Result<(), Infallible>>().await
        }
    });
    (handler, entered_rx, dropped)
}

async fn a_lock_deleted_by_an_operator_ends_the_call_with_lock_lost(kind: Server) {
    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let lock_key = store.lock_redis_key(&redefer::LockKey::new("order:1").unwrap());
    let (handler, entered, dropped) = endless_handler();
    let service = LockLayer::new(store, by_order)
        .ttl(Duration::from_millis(300))
        .layer(handler);
    let call = tokio::spawn(service.oneshot(1));
    entered.await.unwrap();

    let deleted: i64 = server.cmd(::redis::cmd("DEL").arg(&lock_key)).await;
    assert_eq!(deleted, 1, "the lock was in Redis under {lock_key}");

    match call.await.unwrap() {
        Err(Error::LockLost {
            reason: LossReason::Gone,
            ..
        }) => {}
        other => panic!("expected LockLost, got {other:?}"),
    }
    assert!(dropped.load(Ordering::SeqCst), "the handler's future was dropped");
}

/// A handler that blocks its thread cannot be stopped, but its result is not trusted once the
/// renewal (on another thread) found the lock gone meanwhile: the call ends with `LockLost`.
async fn a_lock_deleted_under_a_blocking_handler_ends_the_call_with_lock_lost(kind: Server) {
    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let lock_key = store.lock_redis_key(&redefer::LockKey::new("order:1").unwrap());
    let ttl = Duration::from_millis(300);
    let (entered_tx, entered) = oneshot::channel::<()>();
    let entered_tx = Arc::new(std::sync::Mutex::new(Some(entered_tx)));
    let service = LockLayer::new(store, by_order)
        .ttl(ttl)
        .layer(service_fn(move |_: u32| {
            let entered_tx = entered_tx.clone();
            async move {
                entered_tx.lock().unwrap().take().unwrap().send(()).unwrap();
                std::thread::sleep(ttl * 3);
                Ok::<_, Infallible>(())
            }
        }));
    let call = tokio::spawn(service.oneshot(1));
    entered.await.unwrap();
    let deleted: i64 = server.cmd(::redis::cmd("DEL").arg(&lock_key)).await;
    assert_eq!(deleted, 1, "the lock was in Redis under {lock_key}");
    match call.await.unwrap() {
        Err(Error::LockLost {
            reason: LossReason::Gone,
            ..
        }) => {}
        other => panic!("expected LockLost, got {other:?}"),
    }
}

async fn a_server_killed_under_a_running_handler_ends_the_call_before_the_ttl_runs_out(kind: Server) {
    let mut server = RedisServer::start_of(kind);
    let store = RedisStore::builder()
        .response_timeout(Duration::from_millis(100))
        .connect(&server.url())
        .await
        .unwrap();
    let (handler, entered, dropped) = endless_handler();
    let service = LockLayer::new(store, by_order)
        .ttl(Duration::from_millis(600))
        .layer(handler);
    let call = tokio::spawn(service.oneshot(1));
    entered.await.unwrap();
    server.kill();
    match call.await.unwrap() {
        Err(Error::LockLost {
            reason: LossReason::Unconfirmed,
            ..
        }) => {}
        other => panic!("expected LockLost (unconfirmed), got {other:?}"),
    }
    assert!(dropped.load(Ordering::SeqCst));
}

async fn an_unreachable_server_is_a_typed_error(kind: Server) {
    let closed_port = {
        let server = RedisServer::start_of(kind);
        server.port()
    };
    match RedisStore::connect(&format!("redis://127.0.0.1:{closed_port}")).await {
        Err(StoreError::Redis(error)) => {
            assert!(error.is_connection_refusal() || error.is_io_error(), "{error}")
        }
        Ok(_) => panic!("connected to a closed port"),
        Err(other) => panic!("unexpected error {other}"),
    }
    // Not a Redis URL: said so, nothing tried (see an_address_that_is_not_a_redis_url_says_what_is_wrong).
    assert!(matches!(
        RedisStore::connect("not a url").await,
        Err(StoreError::InvalidUrl { .. })
    ));
}

async fn a_prefix_with_braces_is_rejected(_kind: Server) {
    assert!(matches!(
        RedisStore::builder().prefix("app:{1}"),
        Err(KeyError::BraceInPrefix { .. })
    ));
    assert!(matches!(
        RedisStore::builder().prefix(""),
        Err(KeyError::Empty { .. })
    ));
}

async fn calls_fail_while_redis_is_down_and_succeed_once_it_is_back(kind: Server) {
    let mut server = RedisServer::start_of(kind);
    let store = server.fast_failing_store().await;
    let service =
        LockLayer::new(store, by_order).layer(service_fn(|_: u32| async { Ok::<_, Infallible>("handled") }));

    assert_eq!(service.clone().oneshot(1).await.unwrap().done(), Some("handled"));

    server.kill();
    for _ in 0..3 {
        match service.clone().oneshot(1).await {
            Err(Error::Store(error)) => assert!(error.is_transient(), "{error}"),
            other => panic!("expected a store error while Redis is down, got {other:?}"),
        }
    }

    server.restart();
    let response = eventually(
        Duration::from_secs(10),
        "the same service works once Redis is back",
        || {
            let service = service.clone();
            async move { service.oneshot(1).await.ok().and_then(|outcome| outcome.done()) }
        },
    )
    .await;
    assert_eq!(response, "handled");
}

/// A TCP proxy in front of a server whose connections can be made to go silent: they stay open
/// but relay nothing either way, as when the server's host vanished without a reset or a
/// firewall dropped the connection's state.
struct SilenceableProxy {
    url: String,
    state: Arc<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    /// How many times the open connections were silenced: a connection opened at 0 relays no
    /// byte read once it is above 0.
    silenced: AtomicU64,
    /// While set, no connection relays (one that meets it stays silent for good).
    blacked_out: AtomicBool,
    /// The connections accepted.
    connections: AtomicU64,
}

impl SilenceableProxy {
    async fn start(server_url: String) -> SilenceableProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let server_address = server_url.trim_start_matches("redis://").to_string();
        let state = Arc::new(ProxyState::default());
        let accepting = state.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                accepting.connections.fetch_add(1, Ordering::SeqCst);
                let Ok(outbound) = tokio::net::TcpStream::connect(&server_address).await else {
                    continue;
                };
                let opened_at = accepting.silenced.load(Ordering::SeqCst);
                let (from_client, to_client) = inbound.into_split();
                let (from_server, to_server) = outbound.into_split();
                tokio::spawn(Self::relay(from_client, to_server, accepting.clone(), opened_at));
                tokio::spawn(Self::relay(from_server, to_client, accepting.clone(), opened_at));
            }
        });
        SilenceableProxy { url, state }
    }

    /// Relays what `from` sends to `to` until the connection is silenced; then holds both
    /// halves open and relays nothing.
    async fn relay(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        state: Arc<ProxyState>,
        opened_at: u64,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut buffer = vec![0; 64 * 1024];
        loop {
            let Ok(read @ 1..) = from.read(&mut buffer).await else {
                return;
            };
            if state.silenced.load(Ordering::SeqCst) > opened_at || state.blacked_out.load(Ordering::SeqCst) {
                let _held = (from, to);
                return std::future::pending().await;
            }
            if to.write_all(&buffer[..read]).await.is_err() {
                return;
            }
        }
    }

    /// The connections open now go silent: nothing they send from now on arrives.
    fn silence_open_connections(&self) {
        self.state.silenced.fetch_add(1, Ordering::SeqCst);
    }

    /// Every connection, open now or opened over the next `period`, goes silent; connections
    /// opened after it relay again.
    fn black_out(&self, period: Duration) {
        self.state.blacked_out.store(true, Ordering::SeqCst);
        self.silence_open_connections();
        let state = self.state.clone();
        tokio::spawn(async move {
            tokio::time::sleep(period).await;
            state.blacked_out.store(false, Ordering::SeqCst);
        });
    }

    fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::SeqCst)
    }
}

/// A connection whose server stopped answering on it (its host gone without a reset, its state
/// dropped by a firewall) is given up after its commands time out, and the store goes on over a
/// new one: it used to time out every command for as long as the operating system kept the
/// dead connection open.
async fn a_connection_gone_silent_is_replaced_by_a_new_one(kind: Server) {
    let server = RedisServer::start_of(kind);
    let proxy = SilenceableProxy::start(server.url()).await;
    let store = RedisStore::builder()
        .response_timeout(Duration::from_millis(200))
        .connection_timeout(Duration::from_millis(200))
        .connect(&proxy.url)
        .await
        .unwrap();
    let service =
        LockLayer::new(store, by_order).layer(service_fn(|_: u32| async { Ok::<_, Infallible>("handled") }));
    assert_eq!(service.clone().oneshot(1).await.unwrap().done(), Some("handled"));

    let connections_before = proxy.connections();
    proxy.silence_open_connections();
    let response = eventually(
        Duration::from_secs(10),
        "the service works again over a new connection",
        || {
            let service = service.clone();
            async move { service.oneshot(2).await.ok().and_then(|outcome| outcome.done()) }
        },
    )
    .await;
    assert_eq!(response, "handled");
    assert!(
        proxy.connections() > connections_before,
        "the store connected anew: the first connection relays nothing since it went silent"
    );
}

/// A job whose handler ran past its first lease (renewed meanwhile) and whose ack is lost on a
/// connection gone silent is acknowledged over the next connection, for as long as its renewed
/// lease lasts: the ack's retries used to stop at the end of the lease the job was claimed
/// with, long past by then, so the job stayed in flight and ran again after its lease.
async fn a_long_job_whose_ack_is_lost_is_acked_again_while_its_renewed_lease_lasts(kind: Server) {
    use redefer::queue::{DelayQueue, JobStatus};
    use redefer::{Scheduler, SchedulerOptions};

    let server = RedisServer::start_of(kind);
    let proxy = Arc::new(SilenceableProxy::start(server.url()).await);
    // Each try fails within 100 ms while Redis is silent.
    let store = RedisStore::builder()
        .response_timeout(Duration::from_millis(100))
        .connection_timeout(Duration::from_millis(100))
        .reconnect_attempts(0)
        .connect(&proxy.url)
        .await
        .unwrap();
    let queue = DelayQueue::<u32, _>::new(store.clone(), "orders").unwrap();
    let pushed = queue.push(&1, Duration::ZERO).await.unwrap();
    // Renewed every 800 ms: when the handler returns, at least 1.6 s of it are left.
    let lease = Duration::from_millis(2400);
    let runs = Arc::new(AtomicU64::new(0));
    let (counted, silencer) = (runs.clone(), proxy.clone());
    let handler = service_fn(move |_: u32| {
        let (counted, silencer) = (counted.clone(), silencer.clone());
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            // A long job: one and a half leases, its lease renewed meanwhile.
            tokio::time::sleep(lease * 3 / 2).await;
            // As it returns, Redis goes silent for 800 ms: its ack is lost, and so are the
            // first tries of it on its own, over new connections.
            silencer.black_out(Duration::from_millis(800));
            Ok::<_, Infallible>(())
        }
    });
    let options = SchedulerOptions {
        lease,
        max_idle: Duration::from_millis(100),
        ..SchedulerOptions::default()
    };
    let scheduler = Scheduler::new(queue.clone(), LockLayer::new(store, by_order).layer(handler))
        .options(options)
        .start();
    eventually(Duration::from_secs(10), "the job is acknowledged", || {
        let (queue, id) = (queue.clone(), pushed.id.clone());
        async move { matches!(queue.status(&id).await, Ok(JobStatus::Unknown)).then_some(()) }
    })
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!((report.acked, report.unsettled), (1, 0), "{report:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the job ran once");
}

// ------------------------------------------------- connection faults under a running stack

mod stack {
    use std::convert::Infallible;
    use std::time::Duration;

    use redefer::queue::DelayQueue;
    use redefer::{Error, LockLayer, Outcome, RedisStore, Scheduler, SchedulerHandle, SchedulerOptions};
    use serde::{Deserialize, Serialize};
    use tokio::sync::mpsc;
    use tower::{Layer, ServiceExt};

    use crate::support::{RedisServer, eventually};

    #[derive(Debug, Clone, Serialize, Deserialize)]
    struct Charge {
        order: u64,
    }

    fn by_order(charge: &Charge) -> Option<String> {
        Some(format!("order:{}", charge.order))
    }

    /// The handler: reports each order it handles.
    #[derive(Clone)]
    pub(super) struct Recorder(mpsc::UnboundedSender<u64>);

    impl tower::Service<Charge> for Recorder {
        type Response = ();
        type Error = Infallible;
        type Future = std::future::Ready<Result<(), Infallible>>;

        fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, charge: Charge) -> Self::Future {
            let _ = self.0.send(charge.order);
            std::future::ready(Ok(()))
        }
    }

    type Service = redefer::LockService<
        Recorder,
        RedisStore,
        fn(&Charge) -> Option<String>,
        redefer::strategy::FailFast,
    >;

    /// A lock layer and a scheduler on `server`, with short timeouts; handled orders arrive
    /// on the receiver.
    pub(super) struct Stack {
        queue: DelayQueue<Charge, RedisStore>,
        service: Service,
        pub(super) scheduler: SchedulerHandle,
        handled: mpsc::UnboundedReceiver<u64>,
    }

    /// The stack; the scheduler looks at an idle queue every `max_idle`.
    pub(super) async fn stack(server: &RedisServer, max_idle: Duration) -> Stack {
        let store = server.fast_failing_store().await;
        let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges").unwrap();
        let (tx, handled) = mpsc::unbounded_channel();
        let service = LockLayer::new(store, by_order as fn(&Charge) -> Option<String>).layer(Recorder(tx));
        let options = SchedulerOptions {
            max_idle,
            ..SchedulerOptions::default()
        };
        let scheduler = Scheduler::new(queue.clone(), service.clone())
            .options(options)
            .start();
        Stack {
            queue,
            service,
            scheduler,
            handled,
        }
    }

    impl Stack {
        /// The layer answers again, and a job pushed now is handled: both loops recovered.
        pub(super) async fn recovers(&mut self, order: u64) {
            eventually(Duration::from_secs(10), "the lock layer answers again", || {
                let service = self.service.clone();
                async move {
                    service
                        .oneshot(Charge { order: 1_000 + order })
                        .await
                        .ok()
                        .and_then(Outcome::done)
                }
            })
            .await;
            eventually(Duration::from_secs(10), "a push succeeds again", || {
                let queue = self.queue.clone();
                async move { queue.push(&Charge { order }, Duration::ZERO).await.ok() }
            })
            .await;
            loop {
                let handled = tokio::time::timeout(Duration::from_secs(10), self.handled.recv()).await;
                match handled.expect("the scheduler handles a job pushed after the fault") {
                    Some(handled) if handled == order => return,
                    Some(_) => continue,
                    None => panic!("handler gone"),
                }
            }
        }
    }

    /// How many connections the server has accepted so far.
    pub(super) async fn connections_received(server: &RedisServer) -> u64 {
        let info: String = server.cmd(::redis::cmd("INFO").arg("stats")).await;
        info.lines()
            .find_map(|line| line.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("INFO stats has total_connections_received")
    }

    impl Stack {
        pub(super) async fn call(&self, order: u64) -> Result<Outcome<()>, Error<Infallible>> {
            self.service.clone().oneshot(Charge { order }).await
        }
    }
}

async fn killed_client_connections_surface_as_errors_and_both_loops_recover(kind: Server) {
    let server = RedisServer::start_of(kind);
    let mut stack = stack::stack(&server, Duration::from_millis(200)).await;
    stack.recovers(1).await;
    let before = stack::connections_received(&server).await;
    let killed: i64 = server
        .cmd(::redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal"))
        .await;
    let _: i64 = server
        .cmd(::redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"))
        .await;
    assert!(killed >= 1, "the crate's connections were killed ({killed})");
    stack.recovers(2).await;
    // Two of ours (the store's, the wake-up subscription) plus this check's own.
    assert!(
        stack::connections_received(&server).await >= before + 3,
        "the crate reconnected"
    );
    stack.scheduler.shutdown().await;
}

async fn a_server_timeout_that_drops_idle_connections_is_survived(kind: Server) {
    let server = RedisServer::start_with_of(kind, &["--save", "", "--appendonly", "no", "--timeout", "1"]);
    // The scheduler looks at the idle queue every 3 s: longer than the server waits.
    let mut stack = stack::stack(&server, Duration::from_secs(3)).await;
    stack.recovers(1).await;
    let before = stack::connections_received(&server).await;
    // Idle past the server's timeout: the server closes the store's connection.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    stack.recovers(2).await;
    assert!(
        stack::connections_received(&server).await >= before + 2,
        "the store reconnected"
    );
    stack.scheduler.shutdown().await;
}

async fn a_server_stalled_past_the_response_timeout_gives_timeouts_then_recovers(kind: Server) {
    let server = RedisServer::start_with_of(
        kind,
        &[
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
        ],
    );
    let mut stack = stack::stack(&server, Duration::from_millis(200)).await;
    stack.recovers(1).await;
    let url = server.url();
    // Long enough for a call to meet it after the store has given up its connection: a call's
    // release and its next acquire time out (300 ms each), the store connects anew, and the
    // call's acquire script waits for that connection, whose three attempts (300 ms each) fail
    // only if the server is still asleep.
    let stall = tokio::spawn(async move {
        let client = ::redis::Client::open(url).unwrap();
        let no_timeout = ::redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&no_timeout)
            .await
            .unwrap();
        let _: () = ::redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("3")
            .query_async(&mut conn)
            .await
            .unwrap();
    });
    // While the server sleeps, calls fail with a typed store error instead of hanging.
    let during = eventually(
        Duration::from_secs(3),
        "a call meets the stalled server",
        || async {
            match stack.call(7).await {
                Err(Error::Store(error)) => Some(error),
                _ => None,
            }
        },
    )
    .await;
    assert!(during.is_transient(), "{during}");
    stall.await.unwrap();
    stack.recovers(2).await;
    stack.scheduler.shutdown().await;
}

async fn a_lock_no_replica_acknowledged_is_given_back_when_replication_is_required(kind: Server) {
    use redefer::lock::Acquisition;
    use redefer::{LockKey, LockToken};

    let server = RedisServer::start_of(kind); // no replicas at all
    let store = server
        .store()
        .await
        .wait_for_replicas(1, Duration::from_millis(50));
    let key = LockKey::new("order:1").unwrap();
    match store
        .try_acquire(&key, LockToken::random(), Duration::from_secs(60))
        .await
    {
        Err(StoreError::NotReplicated { acked: 0, wanted: 1 }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    // The lock was given back: a store that does not wait gets it at once.
    let plain = server.store_with_prefix(store.prefix().as_str()).await;
    assert!(matches!(
        plain
            .try_acquire(&key, LockToken::random(), Duration::from_secs(60))
            .await
            .unwrap(),
        Acquisition::Acquired(_)
    ));
}

/// Every token `store` hands out for `key` in three rounds, in order: a lock's (by plain
/// commands and by the script), a semaphore permit's and a job's.
async fn tokens_handed_out(store: RedisStore, key: &redefer::LockKey) -> [Vec<u64>; 3] {
    use crate::support::Shorthand;
    use redefer::guard::Waiter;
    use redefer::lock::Acquisition;
    use redefer::queue::DelayQueue;
    use redefer::{Fencing, LockToken};

    let ttl = Duration::from_secs(10);
    let mut handed: [Vec<u64>; 3] = Default::default();
    for _ in 0..3 {
        let token = LockToken::random();
        let by_set = store.try_acquire(key, token, ttl).await.unwrap();
        let Acquisition::Acquired(Some(fence)) = by_set else {
            panic!("{by_set:?}");
        };
        handed[0].push(fence.0);
        assert!(store.release(key, token).await.unwrap());
        // A waiter's acquire goes through the script.
        let waiter = Waiter::caller(LockToken::random());
        store.join(key, &waiter, None).await.unwrap();
        let token = LockToken::random();
        let by_script = store
            .try_acquire_in_line(key, token, ttl, Some(&waiter), Fencing::On)
            .await
            .unwrap();
        let Acquisition::Acquired(Some(fence)) = by_script else {
            panic!("{by_script:?}");
        };
        handed[0].push(fence.0);
        assert!(store.release(key, token).await.unwrap());
        let permit = LockToken::random();
        let acquired = store
            .try_acquire_permit(key, permit, ttl, 2, None, Fencing::On)
            .await
            .unwrap();
        let Acquisition::Acquired(Some(fence)) = acquired else {
            panic!("{acquired:?}");
        };
        handed[1].push(fence.0);
        assert!(store.release_permit(key, permit, 2, None).await.unwrap());
    }
    let queue = DelayQueue::<u32, _>::new(store, "jobs").unwrap();
    queue.push(&1, Duration::ZERO).await.unwrap();
    let claimed = queue.claim(1, ttl).await.unwrap();
    handed[2].push(claimed.jobs[0].lease.fence().0);
    queue.ack(&claimed.jobs[0].lease).await.unwrap();
    handed
}

/// Asserts that every token of `after` is above every token of `before`, lock, permit and job.
fn above_every_earlier_token(before: &[Vec<u64>; 3], after: &[Vec<u64>; 3], event: &str) {
    for (what, (before, after)) in ["lock", "permit", "job"].iter().zip(before.iter().zip(after)) {
        let (highest_before, lowest_after) = (before.iter().max(), after.iter().min());
        assert!(
            lowest_after > highest_before,
            "{what}: {after:?} after {event}, {before:?} before"
        );
    }
}

/// Every token a restarted Redis without persistence hands out, the first included, is above
/// every token before the restart: a lock's (by plain commands and by the script), a
/// semaphore permit's and a job's.
async fn fencing_tokens_keep_rising_across_a_restart_without_persistence(kind: Server) {
    let mut server = RedisServer::start_with_of(kind, &["--save", "", "--appendonly", "no"]);
    let key = redefer::LockKey::new("order:1").unwrap();
    let before = tokens_handed_out(server.store().await, &key).await;
    server.restart();
    let after = tokens_handed_out(server.store().await, &key).await;
    above_every_earlier_token(&before, &after, "the restart");
}

/// A failover to a replica that lagged: the replica has the counters as they stood when its
/// replication stopped, the primary hands out more tokens and dies, and the replica is
/// promoted. Its tokens, the first included, are above every token the old primary handed
/// out, those it never received too: a lock's, a permit's and a job's.
async fn fencing_tokens_keep_rising_across_a_failover_to_a_replica_that_lagged(kind: Server) {
    let mut primary = RedisServer::start_of(kind);
    let port = primary.port().to_string();
    let replica = RedisServer::start_with_of(
        kind,
        &[
            "--save",
            "",
            "--appendonly",
            "no",
            "--replicaof",
            "127.0.0.1",
            &port,
        ],
    );
    let key = redefer::LockKey::new("acct:1").unwrap();
    let prefix = support::unique_prefix();
    let old_primary = support::store_at(&primary.url(), &prefix).await;
    let mut received = tokens_handed_out(old_primary.clone(), &key).await;
    eventually(
        Duration::from_secs(10),
        "the replica received the first tokens",
        || async {
            let acked: i64 = primary.cmd(::redis::cmd("WAIT").arg(1).arg(100)).await;
            (acked == 1).then_some(())
        },
    )
    .await;
    // The replica stops receiving (its link dropped) and is promoted; the old primary goes on
    // handing out tokens until it dies.
    let _: () = replica.cmd(::redis::cmd("REPLICAOF").arg("NO").arg("ONE")).await;
    let lost = tokens_handed_out(old_primary, &key).await;
    primary.kill();
    for (received, lost) in received.iter_mut().zip(lost) {
        received.extend(lost);
    }
    let after = tokens_handed_out(support::store_at(&replica.url(), &prefix).await, &key).await;
    above_every_earlier_token(&received, &after, "the failover");
}

/// Takes the free `key` and gives it back: the fencing token that holding got.
async fn fence_of_one_holding(store: &RedisStore, key: &redefer::LockKey) -> u64 {
    use redefer::LockToken;
    use redefer::lock::Acquisition;

    let token = LockToken::random();
    let Acquisition::Acquired(Some(fence)) = store
        .try_acquire(key, token, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("the key is free");
    };
    assert!(store.release(key, token).await.unwrap());
    fence.0
}

/// A counter that went back under a store that saw it raised (as one on a promoted replica
/// that lagged, found by a store that follows the failover: a Cluster client, an address that
/// moved): once the failover took longer than 250 ms since the store saw the counter raised,
/// its next acquire goes to the script, which raises the counter to the clock, and the token
/// rises above every earlier one. (Plain `INCR` would hand out the old counter's next value.)
async fn a_counter_gone_back_under_a_store_that_saw_it_raised_still_gives_higher_tokens(kind: Server) {
    use redefer::LockKey;

    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let key = LockKey::new("acct:1").unwrap();
    let fence_key = store.lock_redis_key(&key).replacen(":lock:", ":fence:", 1);
    let fence = async || fence_of_one_holding(&store, &key).await;
    // Raised by the script, then counted by plain commands: the store knows the key.
    let (raised, counted) = (fence().await, fence().await);
    assert!(counted > raised);
    // The failover: the counter goes back to what a replica that lagged holds, and the new
    // primary takes its first acquire of the key more than 250 ms after the store saw the raise.
    let _: () = server.cmd(::redis::cmd("SET").arg(&fence_key).arg(raised)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let next = fence().await;
    assert!(
        next > counted,
        "{next} after the counter went back to {raised}, {counted} before"
    );
}

/// The uncontended acquire is four plain commands in one round trip, not one atomic step: a
/// connection lost on the way can leave its `SET` done and its `INCR` not, and the caller then
/// sends the acquire again by the script. Whichever way it is sent again, it finds its own token
/// on the key and gets a token counted then, above the previous holder's (not the counter as it
/// stood, which is that holder's).
async fn an_acquire_whose_commands_ran_in_part_gets_a_token_above_the_last_holders(kind: Server) {
    use redefer::guard::Waiter;
    use redefer::lock::Acquisition;
    use redefer::{Fencing, LockKey, LockToken};

    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let ttl = Duration::from_secs(60);
    for by_script in [false, true] {
        let key = LockKey::new(format!("order:{by_script}")).unwrap();
        let last = LockToken::random();
        let Acquisition::Acquired(Some(last_fence)) = store.try_acquire(&key, last, ttl).await.unwrap()
        else {
            panic!("the first holder takes the free key");
        };
        assert!(store.release(&key, last).await.unwrap());
        // The next caller's SET reached the server; its INCR and GET did not.
        let token = LockToken::random();
        let hex = String::from_utf8(token.to_hex().to_vec()).unwrap();
        let _: () = server
            .cmd(
                ::redis::cmd("SET")
                    .arg(store.lock_redis_key(&key))
                    .arg(hex)
                    .arg("PX")
                    .arg(60_000),
            )
            .await;
        // A caller with a place in line always acquires by the script.
        let waiter = by_script.then(|| Waiter::caller(token));
        match store
            .try_acquire_in_line(&key, token, ttl, waiter.as_ref(), Fencing::On)
            .await
            .unwrap()
        {
            Acquisition::Acquired(Some(fence)) => assert!(
                fence > last_fence,
                "sent again (by the script: {by_script}), the acquire got {fence}; the last holder had {last_fence}"
            ),
            other => panic!("the acquire sent again finds the key its own: {other:?}"),
        }
    }
}

/// A store remembers the keys it saw with a raised counter and acquires them by plain
/// commands; a counter lost since (deleted here, as a restart without persistence or an
/// eviction would) is found below the floor by those commands, and the token still rises.
async fn a_counter_lost_under_a_store_that_saw_it_counted_still_gives_higher_tokens(kind: Server) {
    use redefer::LockKey;

    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let key = LockKey::new("order:1").unwrap();
    let fence_key = store.lock_redis_key(&key).replacen(":lock:", ":fence:", 1);
    let fence = async || fence_of_one_holding(&store, &key).await;
    // The first by the script, the second by plain commands: the store now knows the key.
    let (first, second) = (fence().await, fence().await);
    assert!(second > first);
    let deleted: u32 = server.cmd(::redis::cmd("DEL").arg(&fence_key)).await;
    assert_eq!(deleted, 1, "{fence_key} is the counter");
    let third = fence().await;
    assert!(
        third > second,
        "{third} after the counter was lost, {second} before"
    );
}

/// A fencing counter expires a minute after it was raised (Redis keeps only what is in use),
/// and one that expired (made to expire at once here) is raised above every token it gave by
/// the next acquire. A caller that meets the key held while the counter is gone counts a new
/// counter on the way (the plain commands' `INCR`); that counter gets its expiry too, and the
/// holder after it still gets a higher token.
async fn an_expired_counter_gives_higher_tokens_and_expires_again(kind: Server) {
    use redefer::lock::Acquisition;
    use redefer::store::lifetimes::IDLE_KEY_TTL;
    use redefer::{LockKey, LockToken};

    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let key = LockKey::new("order:1").unwrap();
    let fence_key = store.lock_redis_key(&key).replacen(":lock:", ":fence:", 1);
    let ttl = Duration::from_secs(60);
    let pttl = async || -> i64 { server.cmd(::redis::cmd("PTTL").arg(&fence_key)).await };
    let acquire = async |token: LockToken| match store.try_acquire(&key, token, ttl).await.unwrap() {
        Acquisition::Acquired(Some(fence)) => Some(fence.0),
        Acquisition::Held { .. } => None,
        other => panic!("{other:?}"),
    };
    // The first by the script, the second by plain commands: the store now knows the key.
    for _ in 0..2 {
        let token = LockToken::random();
        acquire(token).await.expect("the key is free");
        assert!(store.release(&key, token).await.unwrap());
    }
    let expiry = pttl().await;
    assert!(
        expiry > 0 && expiry <= IDLE_KEY_TTL.as_millis() as i64,
        "a raised counter expires within a minute: PTTL {expiry}"
    );

    let holder = LockToken::random();
    let held = acquire(holder).await.expect("the key is free");
    let _: i64 = server.cmd(::redis::cmd("PEXPIRE").arg(&fence_key).arg(1)).await;
    eventually(Duration::from_secs(5), "the counter expired", || async {
        let exists: i64 = server.cmd(::redis::cmd("EXISTS").arg(&fence_key)).await;
        (exists == 0).then_some(())
    })
    .await;
    assert_eq!(acquire(LockToken::random()).await, None, "the key is held");
    let expiry = pttl().await;
    assert!(
        expiry > 0 && expiry <= IDLE_KEY_TTL.as_millis() as i64,
        "the counter a caller that met the key counted again expires too: PTTL {expiry}"
    );
    assert!(store.release(&key, holder).await.unwrap());
    let next = acquire(LockToken::random()).await.expect("the key is free");
    assert!(next > held, "{next} after the counter expired, {held} before");
}

/// A server that lost its scripts (`SCRIPT FLUSH`; a restart without persistence or a failover
/// does the same) is sent them again by the release that meets `NOSCRIPT`: the key, a mutex's
/// or a permit's, is free again long before its TTL would free it.
async fn a_release_on_a_server_that_lost_its_scripts_loads_them_again(kind: Server) {
    let server = RedisServer::start_of(kind);
    let store = server.store().await;
    let ttl = Duration::from_secs(60);
    let handler = service_fn(|_: u32| async { Ok::<_, Infallible>(()) });
    let mutex = LockLayer::new(store.clone(), by_order).ttl(ttl).layer(handler);
    let permits = LockLayer::new(Permits::new(store.clone(), 1), by_order)
        .ttl(ttl)
        .layer(handler);
    let forget_scripts = || async {
        let () = ::redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut store.connection())
            .await
            .unwrap();
    };

    forget_scripts().await;
    assert!(mutex.clone().oneshot(1).await.unwrap().done().is_some());
    eventually(Duration::from_secs(10), "the mutex's key is free again", || {
        let mutex = mutex.clone();
        async move { mutex.oneshot(1).await.ok().and_then(|outcome| outcome.done()) }
    })
    .await;

    forget_scripts().await;
    assert!(permits.clone().oneshot(2).await.unwrap().done().is_some());
    eventually(Duration::from_secs(10), "the permit is free again", || {
        let permits = permits.clone();
        async move { permits.oneshot(2).await.ok().and_then(|outcome| outcome.done()) }
    })
    .await;
}

for_each_server!(
    a_release_on_a_server_that_lost_its_scripts_loads_them_again,
    an_expired_counter_gives_higher_tokens_and_expires_again,
    a_lock_deleted_by_an_operator_ends_the_call_with_lock_lost,
    a_lock_deleted_under_a_blocking_handler_ends_the_call_with_lock_lost,
    a_server_killed_under_a_running_handler_ends_the_call_before_the_ttl_runs_out,
    an_unreachable_server_is_a_typed_error,
    a_prefix_with_braces_is_rejected,
    calls_fail_while_redis_is_down_and_succeed_once_it_is_back,
    a_connection_gone_silent_is_replaced_by_a_new_one,
    a_long_job_whose_ack_is_lost_is_acked_again_while_its_renewed_lease_lasts,
    killed_client_connections_surface_as_errors_and_both_loops_recover,
    a_server_timeout_that_drops_idle_connections_is_survived,
    a_server_stalled_past_the_response_timeout_gives_timeouts_then_recovers,
    a_lock_no_replica_acknowledged_is_given_back_when_replication_is_required,
    fencing_tokens_keep_rising_across_a_restart_without_persistence,
    fencing_tokens_keep_rising_across_a_failover_to_a_replica_that_lagged,
    a_counter_gone_back_under_a_store_that_saw_it_raised_still_gives_higher_tokens,
    an_acquire_whose_commands_ran_in_part_gets_a_token_above_the_last_holders,
    a_counter_lost_under_a_store_that_saw_it_counted_still_gives_higher_tokens,
);

/// A new memory store (a restarted process) hands out tokens above the old one's.
#[tokio::test]
async fn a_new_memory_store_starts_its_tokens_above_the_old_ones() {
    use redefer::lock::Acquisition;
    use redefer::{LockKey, LockToken, MemoryStore};

    let key = LockKey::new("order:1").unwrap();
    let fence = |store: MemoryStore| {
        let key = key.clone();
        async move {
            match store
                .try_acquire(&key, LockToken::random(), Duration::from_secs(1))
                .await
                .unwrap()
            {
                Acquisition::Acquired(Some(fence)) => fence,
                other => panic!("{other:?}"),
            }
        }
    };
    let old = fence(MemoryStore::new()).await;
    let new = fence(MemoryStore::new()).await;
    assert!(new > old, "{new:?} after {old:?}");
}

/// An address that is not a Redis URL is refused before anything is tried, with what is wrong
/// and the forms a Redis URL takes, without its password (it said "Redis URL did not parse -
/// InvalidClientConfig").
#[tokio::test]
async fn an_address_that_is_not_a_redis_url_says_what_is_wrong() {
    for (url, wrong) in [
        ("http://app:s3cret@127.0.0.1:6379", "its scheme is \"http\""),
        ("127.0.0.1:6379", "it has no scheme"),
    ] {
        let error = RedisStore::connect(url).await.map(|_| ()).unwrap_err();
        assert!(matches!(error, StoreError::InvalidUrl { .. }), "{error:?}");
        assert!(!error.is_transient(), "retrying it will not help: {error}");
        let said = error.to_string();
        assert!(
            said.contains("is not a Redis URL") && said.contains(wrong),
            "{said}"
        );
        assert!(said.contains("redis://") && !said.contains("s3cret"), "{said}");
    }
}
