//! The throttle: 5 calls a second per domain, and a domain closed for everyone when its server
//! answers 429 with a "retry after" (a limit the handler learns).
//!
//! ```text
//! cargo run --example throttle                                   # in-process store
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example throttle  # on Redis
//! ```
//!
//! Prints which fetches were admitted and which were refused with the exact time to the
//! domain's next slot; then a fetch that meets a 429 closes the domain for a second, and the
//! fetches after it are refused until it reopens; then an operator reopens it early.

use std::time::{Duration, Instant};

use redefer::throttle::{CloseError, Rate, ThrottleLayer, ThrottleStore, close_for};
use redefer::{Error, LockKey, Outcome};
use tower::{Layer, ServiceExt, service_fn};

#[macro_use]
#[path = "support/store.rs"]
mod store;

/// A fetch of a page of a domain; `rate_limited` plays the server answering 429.
struct Fetch {
    domain: String,
    rate_limited: bool,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run_on_the_store!("redefer-example-throttle", run)
}

async fn run<St: ThrottleStore>(store: St) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let rate = Rate::per_second(5)?;
    let fetches = ThrottleLayer::new(store.clone(), |fetch: &Fetch| Some(fetch.domain.clone()), rate).layer(
        service_fn(|fetch: Fetch| async move {
            if fetch.rate_limited {
                // The server said: not before a second from now. Nobody fetches this domain
                // until then, in any process.
                close_for(Duration::from_secs(1)).await?;
                return Ok::<_, CloseError>(429);
            }
            Ok(200)
        }),
    );
    let fetch = |page: u32, rate_limited: bool| {
        let fetches = fetches.clone();
        async move {
            let domain = "example.org".to_string();
            let answer = fetches.oneshot(Fetch { domain, rate_limited }).await;
            let at = start.elapsed().as_millis();
            match answer {
                Ok(Outcome::Done(status)) => {
                    println!("{at:>5} ms  page {page}: admitted, the server answered {status}")
                }
                Err(Error::Throttled { retry_after, .. }) => {
                    println!(
                        "{at:>5} ms  page {page}: refused, the domain's next slot opens in {retry_after:?}"
                    )
                }
                other => println!("{at:>5} ms  page {page}: {other:?}"),
            }
        }
    };

    println!("-- 8 fetches in a row, 5 a second allowed: one every 200 ms, refused in between");
    for page in 1..=8 {
        fetch(page, false).await;
    }
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    println!("-- the server answers 429 to page 9: the domain closes for a second");
    fetch(9, true).await;
    fetch(10, false).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    println!("-- a second later the domain is open again");
    fetch(11, false).await;

    tokio::time::sleep(Duration::from_millis(250)).await;
    println!("-- page 12 meets a 429 again, and an operator reopens the domain at once");
    println!("   (from code, as here, or with `redefer reopen example.org`)");
    fetch(12, true).await;
    let domain = LockKey::new("example.org")?;
    let opens_in = store.reopen(&domain).await?.ok_or("the domain was not closed")?;
    println!("      reopened: its next slot opens in {opens_in:?}, the rate's, not the closing's second");
    tokio::time::sleep(opens_in).await;
    fetch(13, false).await;
    Ok(())
}
