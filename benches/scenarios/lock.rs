//! Scenario 1: the lock layer, uncontended, fencing on and off, against a bare redis-rs loop
//! issuing `SET NX PX` and a token-checked release, and the same layer with 4 permits per key
//! (the semaphore) against the mutex: interleaved rounds, ratios per round. Each task locks a
//! key of its own again and again, or (a service that locks each order once) a new key per
//! request.
//!
//! A second bare loop sends what the layer's acquire sends (`EXISTS` of the line with the
//! `SET NX PX`, and the fence's `INCR` and `GET` when fenced) in one pipeline: the layer against
//! it is the cost of the middleware itself, apart from the commands its guarantees need.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use redefer::lock::LockStore;
use redefer::semaphore::Permits;
use redefer::{Fencing, LockKey, LockLayer, LockToken, Outcome, RedisStore};
use tower::{Layer, Service, ServiceExt, service_fn};

use crate::Size;
use crate::chart::Chart;
use crate::report::{Table, rate, spread};
use crate::support::RedisServer;

const RELEASE: &str = include_str!("bare_release.lua");

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let rounds = size.pick(5, 1);
    let mut table = Table::new(
        &format!(
            "Lock layer, uncontended: requests/s through LockService with a no-op handler; median [min–max] over {rounds} interleaved rounds"
        ),
        &[
            "concurrency",
            "LockService, fencing on",
            "LockService, fencing off",
            "LockService, 4 permits per key (semaphore)",
            "bare redis-rs loop (SET NX PX, EVALSHA release)",
            "fencing on / bare",
            "fencing off / bare",
            "semaphore / mutex (fencing on)",
            "fencing on / bare loop of its commands",
            "fencing off / bare loop of its commands",
        ],
    );
    let mut chart = Chart::new("Lock layer, uncontended, no-op handler", "requests/s");
    for (concurrency, keys) in [
        (1usize, Keys::OnePerTask),
        (64, Keys::OnePerTask),
        (64, Keys::NewPerRequest),
    ] {
        let requests = size.pick(if concurrency == 1 { 5_000 } else { 30_000 }, 640);
        let (mut on, mut off, mut semaphore, mut bare) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut bare_fenced, mut bare_unfenced) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            on.push(layer_rate(store.clone(), Fencing::On, concurrency, requests, keys).await);
            off.push(layer_rate(store.clone(), Fencing::Off, concurrency, requests, keys).await);
            let permits = Permits::new(store.clone(), 4);
            semaphore.push(layer_rate(permits, Fencing::On, concurrency, requests, keys).await);
            bare.push(bare_rate(&store, concurrency, requests, keys, BareAcquire::Set).await);
            let layers = |fencing| BareAcquire::LayersCommands(fencing);
            bare_fenced.push(bare_rate(&store, concurrency, requests, keys, layers(Fencing::On)).await);
            bare_unfenced.push(bare_rate(&store, concurrency, requests, keys, layers(Fencing::Off)).await);
        }
        let label = match keys {
            Keys::OnePerTask => format!("{concurrency}"),
            Keys::NewPerRequest => format!("{concurrency}, a new key per request"),
        };
        chart.group(&format!("concurrency {label}"));
        chart.bar("LockService, fencing on", &on);
        chart.bar("LockService, fencing off", &off);
        chart.bar("LockService, 4 permits per key", &semaphore);
        chart.bar("bare loop (SET NX PX, EVALSHA release)", &bare);
        chart.bar("bare loop of the layer's commands, fencing on", &bare_fenced);
        chart.bar("bare loop of the layer's commands, fencing off", &bare_unfenced);
        let semaphore_ratios: Vec<f64> = semaphore.iter().zip(&on).map(|(s, m)| s / m).collect();
        let ratios_to = |layer: &[f64], bare: &[f64]| -> Vec<f64> {
            layer.iter().zip(bare).map(|(l, b)| l / b).collect()
        };
        let ratios = |layer: &[f64]| ratios_to(layer, &bare);
        let per_s = |v: f64| format!("{v:.0}/s");
        let times = |v: f64| format!("{v:.2}x");
        table.row(vec![
            label,
            spread(&on, per_s),
            spread(&off, per_s),
            spread(&semaphore, per_s),
            spread(&bare, per_s),
            spread(&ratios(&on), times),
            spread(&ratios(&off), times),
            spread(&semaphore_ratios, times),
            spread(&ratios_to(&on, &bare_fenced), times),
            spread(&ratios_to(&off, &bare_unfenced), times),
        ]);
    }
    table.print();
    chart.write("lock", server, size);
}

/// Which keys the tasks of a run lock.
#[derive(Debug, Clone, Copy)]
pub enum Keys {
    /// Each task its own key, again and again.
    OnePerTask,
    /// A key never locked before for every request: a service that locks each order once.
    NewPerRequest,
}

impl Keys {
    /// The request number that names the key of `task`'s request number `nth`.
    fn request(self, concurrency: usize, task: usize, nth: usize) -> usize {
        match self {
            Keys::OnePerTask => task,
            Keys::NewPerRequest => task + concurrency * nth,
        }
    }

    /// The key of request number `request` in the run `run` (runs of new keys never share one).
    fn name(self, run: usize, request: usize) -> String {
        match self {
            Keys::OnePerTask => format!("bench:{request}"),
            Keys::NewPerRequest => format!("bench-new:{run}:{request}"),
        }
    }
}

/// A number of its own for each run of the process.
fn next_run() -> usize {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    RUNS.fetch_add(1, Ordering::Relaxed)
}

/// Each of `concurrency` tasks locks `keys`, `requests / concurrency` times.
pub async fn layer_rate<St: LockStore>(
    store: St,
    fencing: Fencing,
    concurrency: usize,
    requests: usize,
    keys: Keys,
) -> f64 {
    let run = next_run();
    let service = LockLayer::new(store, move |request: &usize| Some(keys.name(run, *request)))
        .fencing(fencing)
        .layer(service_fn(|_: usize| async { Ok::<_, Infallible>(()) }));
    uncontended_rate(service, concurrency, requests, keys).await
}

/// Requests per second through a guard's `service` when each of `concurrency` tasks sends
/// `requests / concurrency` requests, numbered by `keys` (its own task number again and again,
/// or a new number each time): every one must be done, none deferred.
pub async fn uncontended_rate<S>(service: S, concurrency: usize, requests: usize, keys: Keys) -> f64
where
    S: Service<usize, Response = Outcome<()>> + Clone + Send + 'static,
    S::Error: std::fmt::Debug + Send,
    S::Future: Send,
{
    let per_task = requests / concurrency;
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let service = service.clone();
            tokio::spawn(async move {
                for nth in 0..per_task {
                    let request = keys.request(concurrency, task, nth);
                    let outcome = service.clone().oneshot(request).await.expect("uncontended");
                    assert!(outcome.done().is_some(), "uncontended: never deferred");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    rate(per_task * concurrency, start.elapsed())
}

/// What a bare loop's acquire sends.
#[derive(Debug, Clone, Copy)]
pub enum BareAcquire {
    /// `SET key token NX PX`: the textbook lock.
    Set,
    /// What the layer's uncontended acquire sends, in one pipeline: `EXISTS` of the line and
    /// `SET NX PX`, and with fencing `INCR` of the counter and `GET` of the lock.
    LayersCommands(Fencing),
}

/// The same two round trips with no middleware: the acquire (`SET key token NX PX`, or the
/// layer's commands), then the release script.
pub async fn bare_rate(
    store: &RedisStore,
    concurrency: usize,
    requests: usize,
    keys: Keys,
    acquire: BareAcquire,
) -> f64 {
    let release = redis::Script::new(RELEASE);
    let run = next_run();
    let per_task = requests / concurrency;
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let mut conn = store.connection();
            let store = store.clone();
            let redis_keys = move |name: String| {
                let lock = store.lock_redis_key(&LockKey::new(name).expect("valid key"));
                let line_and_fence = match acquire {
                    BareAcquire::Set => None,
                    BareAcquire::LayersCommands(_) => Some((format!("{lock}:line"), format!("{lock}:fence"))),
                };
                (lock, line_and_fence)
            };
            // A task's own key is named once; a new key is named per request, as the layer does.
            let own_key = matches!(keys, Keys::OnePerTask).then(|| redis_keys(format!("bare:{task}")));
            let new_key = move |request: usize| redis_keys(keys.name(run, request));
            let release = release.clone();
            tokio::spawn(async move {
                for nth in 0..per_task {
                    let fresh;
                    let (key, line_and_fence) = match &own_key {
                        Some(keys) => keys,
                        None => {
                            fresh = new_key(keys.request(concurrency, task, nth));
                            &fresh
                        }
                    };
                    let token = LockToken::random();
                    let mut set = redis::cmd("SET");
                    set.arg(key).arg(token).arg("NX").arg("PX").arg(10_000);
                    let taken = match acquire {
                        BareAcquire::Set => {
                            let set: Option<String> = set.query_async(&mut conn).await.expect("SET");
                            set.is_some()
                        }
                        BareAcquire::LayersCommands(fencing) => {
                            let (line, fence) = line_and_fence.as_ref().expect("named with the lock");
                            let mut commands = redis::pipe();
                            commands.cmd("EXISTS").arg(line).add_command(set);
                            if fencing == Fencing::On {
                                commands.cmd("INCR").arg(fence).cmd("GET").arg(key);
                            }
                            let replies: Vec<redis::Value> = commands
                                .query_async(&mut conn)
                                .await
                                .expect("the layer's commands");
                            replies.get(1) == Some(&redis::Value::Okay)
                        }
                    };
                    assert!(taken, "uncontended");
                    let released: i64 = release
                        .key(key)
                        .arg(token)
                        .invoke_async(&mut conn)
                        .await
                        .expect("release");
                    assert_eq!(released, 1);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    rate(per_task * concurrency, start.elapsed())
}
