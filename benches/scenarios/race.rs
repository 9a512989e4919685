//! Scenario: the lock layer raced as a user would measure it from outside the project. 64
//! tasks, each looping over 8 keys of its own with a no-op handler, for 2 s rounds
//! interleaved: the bare loop on a multiplexed connection of its own with redis-rs's defaults
//! (`SET NX PX`, then the token-checked release by `EVALSHA`, both awaited), the layer on a
//! store made by `RedisStore::connect` with its defaults (fencing on and off, and 4 permits
//! per key), and rslock, the Redlock crate a Rust user would pick instead (one instance, `lock`
//! then `unlock`). Nothing here uses the bench's own store: what a newcomer would write. Each
//! round also measures the CPU this process and Redis spent per request: the client's share
//! is what the layer adds to the protocol.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redefer::semaphore::Permits;
use redefer::{Fencing, LockLayer, LockToken, RedisStore};
use tower::{Layer, ServiceExt, service_fn};

use crate::Size;
use crate::profile::cpu_time;
use crate::redis_info;
use crate::report::{Table, spread};
use crate::support::RedisServer;

const RELEASE: &str = include_str!("bare_release.lua");
const TASKS: usize = 64;
const KEYS_PER_TASK: usize = 8;

pub async fn run(server: &RedisServer, size: Size) {
    let rounds = size.pick(5, 1);
    let round = size.seconds(2);
    let url = server.url();
    let mut results: [Vec<f64>; 6] = Default::default();
    let mut server_cpu: [Vec<f64>; 6] = Default::default();
    let mut client_cpu: [Vec<f64>; 6] = Default::default();
    for _ in 0..rounds {
        for (at, contender) in [
            Contender::Bare {
                on_store_connection: false,
            },
            Contender::Layer(Guard::Mutex(Fencing::On)),
            Contender::Layer(Guard::Mutex(Fencing::Off)),
            Contender::Layer(Guard::Semaphore),
            Contender::Bare {
                on_store_connection: true,
            },
            Contender::Rslock,
        ]
        .into_iter()
        .enumerate()
        {
            let cpu_before = redis_info::cpu_time(server).await;
            let client_before = cpu_time();
            let (requests, elapsed) = match contender {
                Contender::Bare { on_store_connection } => bare(&url, round, on_store_connection).await,
                Contender::Layer(guard) => layer(&url, round, guard).await,
                Contender::Rslock => rslock(&url, round).await,
            };
            let client = cpu_time().saturating_sub(client_before);
            let cpu = redis_info::cpu_time(server).await.saturating_sub(cpu_before);
            let per_request = |cpu: Duration| cpu.as_secs_f64() * 1e6 / requests.max(1) as f64;
            results[at].push(requests as f64 / elapsed.as_secs_f64());
            server_cpu[at].push(per_request(cpu));
            client_cpu[at].push(per_request(client));
        }
    }
    let [bare, on, off, semaphore, bare_on_store, rslock] = results;
    let ratios =
        |layer: &[f64], to: &[f64]| -> Vec<f64> { layer.iter().zip(to).map(|(l, b)| l / b).collect() };
    let per_s = |v: f64| format!("{v:.0}/s");
    let times = |v: f64| format!("{v:.2}x");
    let mut table = Table::new(
        &format!(
            "From outside: {TASKS} tasks over {KEYS_PER_TASK} keys each, {}s rounds; median [min–max] over {rounds} interleaved rounds",
            round.as_secs_f64()
        ),
        &[
            "bare loop (own connection)",
            "layer, fencing on",
            "layer, fencing off",
            "layer, 4 permits",
            "rslock",
            "fencing on / bare",
            "fencing on / rslock",
            "rslock / bare",
            "fencing off / bare",
            "4 permits / fencing on",
            "bare loop on the store's connection / on its own",
            "Redis CPU per request: bare, fencing on, off, 4 permits, bare on the store's connection, rslock",
            "client CPU per request: same order",
            "client CPU per request, fencing on / bare",
        ],
    );
    let micros = |v: f64| format!("{v:.1} µs");
    table.row(vec![
        spread(&bare, per_s),
        spread(&on, per_s),
        spread(&off, per_s),
        spread(&semaphore, per_s),
        spread(&rslock, per_s),
        spread(&ratios(&on, &bare), times),
        spread(&ratios(&on, &rslock), times),
        spread(&ratios(&rslock, &bare), times),
        spread(&ratios(&off, &bare), times),
        spread(&ratios(&semaphore, &on), times),
        spread(&ratios(&bare_on_store, &bare), times),
        server_cpu
            .iter()
            .map(|cpu| spread(cpu, micros))
            .collect::<Vec<_>>()
            .join(", "),
        client_cpu
            .iter()
            .map(|cpu| spread(cpu, micros))
            .collect::<Vec<_>>()
            .join(", "),
        spread(&ratios(&client_cpu[1], &client_cpu[0]), times),
    ]);
    table.print();
}

/// What a round measures.
#[derive(Debug, Clone, Copy)]
enum Contender {
    Bare { on_store_connection: bool },
    Layer(Guard),
    Rslock,
}

/// What the layer guards with.
#[derive(Debug, Clone, Copy)]
enum Guard {
    Mutex(Fencing),
    Semaphore,
}

/// The key a task locks on its `nth` request.
fn key_of(task: usize, nth: usize) -> String {
    format!("race:{task}:{}", nth % KEYS_PER_TASK)
}

/// Requests done by the bare loop over `round`, and the time they took: on a multiplexed
/// connection of its own (redis-rs's defaults), or on the connection of a store made by
/// `RedisStore::connect` (a `ManagedConnection` over redis-rs's `ConnectionManager`, as the lock scenario's bare loop).
async fn bare(url: &str, round: Duration, on_store_connection: bool) -> (usize, Duration) {
    if on_store_connection {
        let store = RedisStore::connect(url).await.expect("a store");
        return bare_on(store.connection(), round).await;
    }
    let client = redis::Client::open(url).expect("url");
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    bare_on(conn, round).await
}

async fn bare_on<C>(conn: C, round: Duration) -> (usize, Duration)
where
    C: redis::aio::ConnectionLike + Clone + Send + 'static,
{
    let release = redis::Script::new(RELEASE);
    run_round(round, move |task, round| {
        let mut conn = conn.clone();
        let release = release.clone();
        async move {
            let mut nth = 0;
            while round.goes_on() {
                let key = key_of(task, nth);
                let token = LockToken::random();
                let taken: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000)
                    .query_async(&mut conn)
                    .await
                    .expect("SET");
                assert!(taken.is_some(), "uncontended");
                let released: i64 = release
                    .key(&key)
                    .arg(token)
                    .invoke_async(&mut conn)
                    .await
                    .expect("release");
                assert_eq!(released, 1);
                nth += 1;
                round.count();
            }
        }
    })
    .await
}

/// Requests done by rslock over `round` (`lock`, then `unlock`, on one instance), and the time
/// they took.
async fn rslock(url: &str, round: Duration) -> (usize, Duration) {
    let locks = rslock::LockManager::new(vec![url.to_string()]);
    run_round(round, move |task, round| {
        let locks = locks.clone();
        async move {
            let mut nth = 0;
            while round.goes_on() {
                let key = key_of(task, nth);
                let lock = locks
                    .lock(key.as_bytes(), Duration::from_secs(10))
                    .await
                    .expect("uncontended");
                locks.unlock(&lock).await;
                nth += 1;
                round.count();
            }
        }
    })
    .await
}

/// Requests done through the layer over `round`, and the time they took.
async fn layer(url: &str, round: Duration, guard: Guard) -> (usize, Duration) {
    let store = RedisStore::connect(url).await.expect("a store");
    let key = |request: &(usize, usize)| Some(key_of(request.0, request.1));
    let handler = service_fn(|_: (usize, usize)| async { Ok::<_, Infallible>(()) });
    match guard {
        Guard::Mutex(fencing) => {
            let service = LockLayer::new(store, key).fencing(fencing).layer(handler);
            drive(service, round).await
        }
        Guard::Semaphore => {
            let service = LockLayer::new(Permits::new(store, 4), key).layer(handler);
            drive(service, round).await
        }
    }
}

async fn drive<S>(service: S, round: Duration) -> (usize, Duration)
where
    S: tower::Service<(usize, usize), Response = redefer::Outcome<()>> + Clone + Send + 'static,
    S::Error: std::fmt::Debug + Send,
    S::Future: Send,
{
    run_round(round, move |task, round| {
        let service = service.clone();
        async move {
            let mut nth = 0;
            while round.goes_on() {
                let outcome = service.clone().oneshot((task, nth)).await.expect("uncontended");
                assert!(outcome.done().is_some(), "uncontended: never deferred");
                nth += 1;
                round.count();
            }
        }
    })
    .await
}

/// One round of a contender: its deadline and the requests its tasks did.
#[derive(Clone)]
struct Round {
    start: Instant,
    length: Duration,
    done: Arc<AtomicUsize>,
}

impl Round {
    fn goes_on(&self) -> bool {
        self.start.elapsed() < self.length
    }

    fn count(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs `TASKS` tasks made by `task` (its number and the round) for `length`; the requests they
/// did, and the time they took.
async fn run_round<T, Task>(length: Duration, task: T) -> (usize, Duration)
where
    T: Fn(usize, Round) -> Task,
    Task: Future<Output = ()> + Send + 'static,
{
    let round = Round {
        start: Instant::now(),
        length,
        done: Arc::default(),
    };
    let tasks: Vec<_> = (0..TASKS)
        .map(|number| tokio::spawn(task(number, round.clone())))
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    (round.done.load(Ordering::Relaxed), round.start.elapsed())
}
