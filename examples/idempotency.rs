//! Idempotency: a webhook delivered three times runs once, whether its first delivery ran at
//! once or was deferred because its order was busy.
//!
//! ```text
//! cargo run --example idempotency                                   # in-process store
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example idempotency  # on Redis
//! ```
//!
//! Prints what each delivery got: the first runs (or is deferred, its order being held), the
//! redeliveries are answered as duplicates of it, with what became of it; the handler counts
//! one run per delivery id.

use std::convert::Infallible;
use std::time::Duration;

use redefer::idempotency::{IdempotencyLayer, IdempotencyStore};
use redefer::lock::{Fencing, Holders, LockStore};
use redefer::queue::{DelayQueue, QueueStore, Retention};
use redefer::strategy::Defer;
use redefer::{LockKey, LockLayer, LockToken, Outcome};
use tower::{ServiceBuilder, ServiceExt, service_fn};

#[macro_use]
#[path = "support/store.rs"]
mod store;

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Webhook {
    delivery: String,
    order: u64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run_on_the_store!("redefer-example-idempotency", run)
}

async fn run<St>(store: St) -> Result<(), Box<dyn std::error::Error>>
where
    St: LockStore + QueueStore + IdempotencyStore,
{
    // Finished jobs and direct runs are remembered for a day: a redelivery within it is a
    // duplicate.
    let queue = DelayQueue::<Webhook, _>::new(store.clone(), "webhooks")?
        .retain_finished(Retention::new(10_000, Duration::from_secs(24 * 3600)));
    let hooks = ServiceBuilder::new()
        .layer(
            IdempotencyLayer::new(queue.clone(), |hook: &Webhook| Some(hook.delivery.clone())).over_guard(),
        )
        .layer(
            LockLayer::new(store.clone(), |hook: &Webhook| {
                Some(format!("order:{}", hook.order))
            })
            .on_conflict(Defer::new(queue)),
        )
        .service(service_fn(|hook: Webhook| async move {
            println!(
                "  the handler runs delivery {} for order {}",
                hook.delivery, hook.order
            );
            Ok::<_, Infallible>(())
        }));
    let deliver = |delivery: &str, order: u64| {
        let hooks = hooks.clone();
        let hook = Webhook {
            delivery: delivery.to_string(),
            order,
        };
        async move {
            match hooks.oneshot(hook.clone()).await? {
                Outcome::Done(()) => println!("delivery {}: ran", hook.delivery),
                Outcome::Deferred(job) => println!(
                    "delivery {}: deferred as job {} (its order is busy)",
                    hook.delivery, job.job_id
                ),
                Outcome::Duplicate(duplicate) => {
                    println!(
                        "delivery {}: a duplicate, not run ({:?})",
                        hook.delivery, duplicate.seen
                    )
                }
                other => println!("delivery {}: {other:?}", hook.delivery),
            }
            Ok::<_, Box<dyn std::error::Error>>(())
        }
    };

    // Ids of this run's deliveries: a run again on the same Redis starts afresh.
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let (first, second) = (format!("d-1-{run}"), format!("d-2-{run}"));

    println!("-- {first} for order 7, delivered three times");
    for _ in 0..3 {
        deliver(&first, 7).await?;
    }

    println!("-- {second} for order 8 while another request holds order 8, delivered twice");
    let holder = LockToken::random();
    let order_8 = LockKey::new("order:8")?;
    store
        .acquire(
            &order_8,
            holder,
            Duration::from_secs(30),
            Holders::One,
            None,
            Fencing::On,
        )
        .await?;
    for _ in 0..2 {
        deliver(&second, 8).await?;
    }
    store
        .release_holding(&order_8, holder, Holders::One, None)
        .await?;
    println!("job {second} runs once, when a Scheduler claims it (examples/worker.rs runs one)");
    Ok(())
}
