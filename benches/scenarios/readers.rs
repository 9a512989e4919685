//! Readers beside writers (`ReadWriteLayer`), the two goals of issue 37:
//!
//! - a writer among a stream of readers: a reader arrives every 5 ms and reads for 20 ms (four
//!   or five read at once), a writer arrives every 50 ms and writes for 1 ms. With writer
//!   precedence a writer waits for the readers ahead of it only: its wait is at most about one
//!   reader's hold plus the handoff. Its wait is measured from its call to its handler;
//! - readers alone against a semaphore of the same limit: 64 loops over 16 keys, 8 readers per
//!   key at most, a no-op handler: what the read-write lock's bookkeeping costs.
//!
//! Rounds interleaved, each figure the median and range of the rounds.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redefer::read_write::{Access, ReadWriteLayer};
use redefer::strategy::Retry;
use redefer::{Backoff, LockLayer, RedisStore};
use tower::{Layer, Service, ServiceExt, service_fn};

use crate::Size;
use crate::report::{Table, median, ms, per_s, percentile, rate, spread};
use crate::support::RedisServer;

/// How long a reader of the stream reads, and how often one comes.
const READ: Duration = Duration::from_millis(20);
const READER_EVERY: Duration = Duration::from_millis(5);
/// How long a writer writes, and how often one comes.
const WRITE: Duration = Duration::from_millis(1);
const WRITER_EVERY: Duration = Duration::from_millis(50);

/// Readers alone: loops, keys, and the limit of readers (and permits) per key.
const LOOPS: usize = 64;
const KEYS: usize = 16;
const LIMIT: u32 = 8;

fn retry() -> Retry {
    Retry::new(Backoff::exponential(
        Duration::from_millis(1),
        Duration::from_millis(20),
    ))
    .max_attempts(u32::MAX)
    .max_wait(Duration::from_secs(30))
}

/// A request of the stream: whether it writes, and when it was sent.
#[derive(Clone, Copy)]
struct Request {
    writes: bool,
    sent: Instant,
}

/// The waits of one round of the stream, from call to handler.
struct StreamRound {
    writers: Vec<Duration>,
    readers: Vec<Duration>,
}

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let rounds = size.pick(5, 1);
    let load = size.seconds(3);
    let (mut streams, mut read_write, mut semaphore) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        streams.push(stream(&store, round, load).await);
        read_write.push(readers_alone(read_write_service(&store), load).await);
        semaphore.push(readers_alone(semaphore_service(&store), load).await);
    }

    let mut table = Table::new(
        &format!(
            "A writer among readers: a reader every {READER_EVERY:?} reading {READ:?}, a writer every {WRITER_EVERY:?} writing {WRITE:?}; wait from call to handler, {rounds} rounds of {load:?}"
        ),
        &["who", "waits", "p50", "p99", "max"],
    );
    for (label, of) in [
        (
            "writers",
            (|round: &StreamRound| round.writers.clone()) as fn(&StreamRound) -> Vec<Duration>,
        ),
        ("readers", |round: &StreamRound| round.readers.clone()),
    ] {
        let mut p50 = Vec::new();
        let mut p99 = Vec::new();
        let mut max = Vec::new();
        let mut count = 0;
        for round in &streams {
            let mut waits = of(round);
            count += waits.len();
            p50.push(percentile(&mut waits, 0.5).as_secs_f64());
            p99.push(percentile(&mut waits, 0.99).as_secs_f64());
            max.push(percentile(&mut waits, 1.0).as_secs_f64());
        }
        let as_ms = |s: f64| ms(Duration::from_secs_f64(s));
        table.row(vec![
            label.to_string(),
            count.to_string(),
            spread(&p50, as_ms),
            spread(&p99, as_ms),
            spread(&max, as_ms),
        ]);
    }
    table.print();
    let writer_p99: Vec<f64> = streams
        .iter()
        .map(|round| percentile(&mut round.writers.clone(), 0.99).as_secs_f64())
        .collect();
    println!(
        "\nA writer's wait p99, median of the rounds: {} (one reader's hold is {}).",
        ms(Duration::from_secs_f64(median(&writer_p99))),
        ms(READ)
    );

    let mut table = Table::new(
        &format!(
            "Readers alone: {LOOPS} loops over {KEYS} keys, at most {LIMIT} per key, no-op handler, {rounds} interleaved rounds of {load:?}"
        ),
        &["guard", "reads"],
    );
    table.row(vec![
        format!("ReadWriteLayer, readers({LIMIT})"),
        spread(&read_write, per_s),
    ]);
    table.row(vec![
        format!("LockLayer, permits({LIMIT})"),
        spread(&semaphore, per_s),
    ]);
    let ratios: Vec<f64> = read_write
        .iter()
        .zip(&semaphore)
        .map(|(rw, sem)| rw / sem)
        .collect();
    table.row(vec![
        "read-write / semaphore, round by round".to_string(),
        spread(&ratios, |r| format!("{r:.2}x")),
    ]);
    table.print();
    println!(
        "\nMedian throughput ratio read-write / semaphore: {:.2}x.",
        median(&ratios)
    );
}

/// The stream on a key of its own for `load`: readers and writers sent on their schedules,
/// each noting its wait.
async fn stream(store: &RedisStore, round: usize, load: Duration) -> StreamRound {
    let key = format!("report:{round}");
    let waits: Arc<Mutex<(Vec<Duration>, Vec<Duration>)>> = Arc::default();
    let service = ReadWriteLayer::new(
        store.clone(),
        move |_: &Request| Some(key.clone()),
        |request: &Request| {
            if request.writes {
                Access::Write
            } else {
                Access::Read
            }
        },
    )
    .on_conflict(retry())
    .layer(service_fn({
        let waits = Arc::clone(&waits);
        move |request: Request| {
            let waited = request.sent.elapsed();
            {
                let mut waits = waits.lock().expect("waits");
                if request.writes {
                    waits.0.push(waited);
                } else {
                    waits.1.push(waited);
                }
            }
            async move {
                tokio::time::sleep(if request.writes { WRITE } else { READ }).await;
                Ok::<_, std::convert::Infallible>(())
            }
        }
    }));
    let send = |every: Duration, writes: bool| {
        let service = service.clone();
        tokio::spawn(async move {
            let mut calls = Vec::new();
            let mut ticks = tokio::time::interval(every);
            let end = Instant::now() + load;
            while Instant::now() < end {
                ticks.tick().await;
                let request = Request {
                    writes,
                    sent: Instant::now(),
                };
                calls.push(tokio::spawn(service.clone().oneshot(request)));
            }
            for call in calls {
                let outcome = call.await.expect("a call ends").expect("a request ends");
                assert!(outcome.done().is_some(), "a request runs");
            }
        })
    };
    let (readers, writers) = (send(READER_EVERY, false), send(WRITER_EVERY, true));
    readers.await.expect("the readers end");
    writers.await.expect("the writers end");
    let (writers, readers) = std::mem::take(&mut *waits.lock().expect("waits"));
    StreamRound { writers, readers }
}

fn read_write_service(
    store: &RedisStore,
) -> impl Service<usize, Response: Send, Error: std::fmt::Debug + Send, Future: Send> + Clone + Send + 'static
{
    ReadWriteLayer::new(
        store.clone(),
        |n: &usize| Some(format!("shared:{}", n % KEYS)),
        |_: &usize| Access::Read,
    )
    .readers(LIMIT)
    .on_conflict(retry())
    .layer(no_op())
}

fn semaphore_service(
    store: &RedisStore,
) -> impl Service<usize, Response: Send, Error: std::fmt::Debug + Send, Future: Send> + Clone + Send + 'static
{
    LockLayer::new(store.clone(), |n: &usize| Some(format!("shared:{}", n % KEYS)))
        .permits(LIMIT)
        .on_conflict(retry())
        .layer(no_op())
}

fn no_op() -> impl Service<usize, Response = (), Error = std::convert::Infallible, Future: Send> + Clone + Send
{
    service_fn(|_: usize| async { Ok(()) })
}

/// `LOOPS` loops of reads through `service` for `load`; the reads per second.
async fn readers_alone<S>(service: S, load: Duration) -> f64
where
    S: Service<usize, Response: Send, Error: std::fmt::Debug + Send, Future: Send> + Clone + Send + 'static,
{
    let end = Instant::now() + load;
    let started = Instant::now();
    let loops: Vec<_> = (0..LOOPS)
        .map(|n| {
            let service = service.clone();
            tokio::spawn(async move {
                let mut reads = 0;
                while Instant::now() < end {
                    service.clone().oneshot(n + reads).await.expect("a read ends");
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let mut reads = 0;
    for one in loops {
        reads += one.await.expect("a loop ends");
    }
    rate(reads, started.elapsed())
}
