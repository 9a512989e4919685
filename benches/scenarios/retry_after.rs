//! Scenario 11: how good a refused caller's `retry_after` is. A holder keeps a key for 40 to
//! 80 ms; 10 ms in, a fail-fast caller meets it and is told `retry_after`; the holder's release
//! says what the wait really was. On a cold key (never held before: the estimate falls back to
//! the layer's average hold, else the default) and on a warm one (its own holds sampled), in
//! interleaved rounds; the median error of each round, and over the rounds their median and
//! range.

use std::convert::Infallible;
use std::time::Duration;

use rand::RngExt;
use redefer::{Error, LockLayer};
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

use crate::Size;
use crate::report::{Table, median, spread};
use crate::support::RedisServer;

/// When the fail-fast caller comes, after the holder took the key.
const ARRIVES_AFTER: Duration = Duration::from_millis(10);

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    // (key, hold in ms): the handler holds the key that long.
    let service = LockLayer::new(store, |(key, _): &(String, u64)| Some(key.clone())).layer(service_fn(
        |(_, hold_ms): (String, u64)| async move {
            tokio::time::sleep(Duration::from_millis(hold_ms)).await;
            Ok::<_, Infallible>(Instant::now())
        },
    ));
    let trials = size.pick(20, 3);
    let rounds = size.pick(5, 1);
    // The warm key's holds, sampled one release in eight: enough that several were.
    for _ in 0..size.pick(48, 8) {
        let _ = service.clone().oneshot(("warm".to_string(), 60)).await;
    }
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for (kind, errors) in [("cold", &mut cold), ("warm", &mut warm)] {
            let mut round_errors = Vec::new();
            for trial in 0..trials {
                let key = match kind {
                    "cold" => format!("cold:{round}:{trial}"),
                    _ => "warm".to_string(),
                };
                if let Some(error) = one_trial(&service, key).await {
                    round_errors.push(error);
                }
            }
            errors.push(median(&round_errors));
        }
    }
    let mut table = Table::new(
        &format!(
            "retry_after against the real wait (holds of 40–80 ms, the caller 10 ms in; median per round of {trials}, {rounds} interleaved rounds)"
        ),
        &["key", "median absolute error (ms)"],
    );
    table.row(vec![
        "cold (never held)".into(),
        spread(&cold, |ms| format!("{ms:.1}")),
    ]);
    table.row(vec![
        "warm (holds sampled)".into(),
        spread(&warm, |ms| format!("{ms:.1}")),
    ]);
    table.print();
}

/// One holder, one refused caller: |retry_after − the wait until the release|, in ms.
async fn one_trial<S>(service: &S, key: String) -> Option<f64>
where
    S: tower::Service<(String, u64), Response = redefer::Outcome<Instant>, Error = Error<Infallible>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let hold_ms = rand::rng().random_range(40..=80);
    let holder = tokio::spawn(service.clone().oneshot((key.clone(), hold_ms)));
    tokio::time::sleep(ARRIVES_AFTER).await;
    let told_at = Instant::now();
    let told = match service.clone().oneshot((key, 0)).await {
        Err(Error::Locked { retry_after, .. }) => retry_after,
        _ => None, // the holder was not there yet (a busy host): no sample
    };
    let released = holder.await.ok()?.ok()?.done()?;
    let actual = released.saturating_duration_since(told_at);
    let told = told?;
    Some((told.as_secs_f64() - actual.as_secs_f64()).abs() * 1000.0)
}
