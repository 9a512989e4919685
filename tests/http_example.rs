//! examples/http.rs, run as a process on loopback against a real Redis and driven by a real
//! HTTP client: 200 with the fencing token, 409 with Retry-After under concurrent conflicting
//! requests, 202 with a job id for `Prefer: respond-async`, the deferred change applied later,
//! and the metrics page.

use crate::support;

use crate::support::Shorthand;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redefer::lock::Acquisition;
use redefer::{LockKey, LockToken};
use serde_json::{Value, json};

use support::{RedisServer, eventually, example_binary, free_port};

/// The example, listening on a free port; killed on drop.
struct Service {
    child: Child,
    base: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(server: &RedisServer) -> Service {
    let port = free_port();
    let mut child = Command::new(example_binary("http"))
        .env("PORT", port.to_string())
        .env("REDIS_URL", server.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the http example");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("its first line");
    assert!(line.starts_with("listening on "), "{line}");
    Service {
        child,
        base: format!("http://127.0.0.1:{port}"),
    }
}

async fn put(client: &reqwest::Client, url: &str, body: Value, respond_async: bool) -> reqwest::Response {
    let mut request = client.put(url).json(&body);
    if respond_async {
        request = request.header("prefer", "respond-async");
    }
    request.send().await.expect("PUT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_example_maps_lock_outcomes_to_http() {
    let server = RedisServer::start();
    let service = start(&server);
    let client = reqwest::Client::new();
    let order = |n: u32| format!("{}/orders/{n}", service.base);

    // Uncontended: 200, with the fencing token the handler ran under.
    let done = put(&client, &order(1), json!({ "note": "paid" }), false).await;
    assert_eq!(done.status(), 200);
    let state: Value = done.json().await.unwrap();
    assert_eq!(state["note"], "paid");
    assert!(state["fence"].as_u64().unwrap() >= 1);

    // Five concurrent changes to one order: one runs, the others get 409 with Retry-After.
    let calls: Vec<_> = (0..5)
        .map(|n| {
            let (client, url) = (client.clone(), order(2));
            tokio::spawn(async move {
                put(
                    &client,
                    &url,
                    json!({ "note": format!("change {n}"), "work_ms": 1500 }),
                    false,
                )
                .await
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for call in calls {
        let response = call.await.unwrap();
        statuses.push(response.status().as_u16());
        if response.status() == 409 {
            let retry_after: u64 = response.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                (1..=5).contains(&retry_after),
                "Retry-After in whole seconds within the 5 s TTL: {retry_after}"
            );
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["retry_after_s"], retry_after);
        }
    }
    statuses.sort();
    assert_eq!(statuses, [200, 409, 409, 409, 409]);

    // While another process holds order 3, `Prefer: respond-async` gets 202 and a job id, and a
    // plain change gets 409; once the holder lets go, the deferred change lands under a later lock.
    let holder = server.store_with_prefix("redefer-http").await;
    let (key, token) = (LockKey::new("order:3").unwrap(), LockToken::random());
    let Acquisition::Acquired(held_fence) = holder
        .try_acquire(&key, token, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("order 3 is free");
    };
    let accepted = put(&client, &order(3), json!({ "note": "deferred" }), true).await;
    assert_eq!(accepted.status(), 202);
    let body: Value = accepted.json().await.unwrap();
    let job_id = body["job_id"].as_str().unwrap().to_string();
    assert_eq!(job_id.len(), 32);
    let job = |id: String| {
        let (client, url) = (client.clone(), format!("{}/jobs/{id}", service.base));
        async move { client.get(&url).send().await.unwrap() }
    };
    let waiting: Value = job(job_id.clone()).await.json().await.unwrap();
    assert_eq!(waiting["status"], "waiting", "{waiting}");
    assert_eq!(job("0".repeat(32)).await.status(), 404, "an id never pushed");
    assert_eq!(
        put(&client, &order(3), json!({ "note": "refused" }), false)
            .await
            .status(),
        409
    );
    assert!(holder.release(&key, token).await.unwrap());
    let applied = eventually(Duration::from_secs(10), "the deferred change is applied", || {
        let (client, url) = (client.clone(), order(3));
        async move {
            let state: Value = client.get(&url).send().await.ok()?.json().await.ok()?;
            (state["note"] == "deferred").then_some(state)
        }
    })
    .await;
    assert!(
        applied["fence"].as_u64().unwrap() > held_fence.expect("fenced").0,
        "written under a later lock"
    );
    // After the fact, the 202's job id says it is done, and how many runs it took.
    let done = eventually(Duration::from_secs(10), "the job is acked", || {
        let reply = job(job_id.clone());
        async move {
            let status: Value = reply.await.json().await.ok()?;
            (status["status"] == "done").then_some(status)
        }
    })
    .await;
    assert_eq!(done["attempts"], 1, "{done}");
    assert!(done["finished_at"].is_string(), "{done}");

    let metrics = client
        .get(format!("{}/metrics", service.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "redefer_lock_acquired_total",
        "redefer_lock_conflicts_total",
        "redefer_jobs_acked_total",
    ] {
        assert!(metrics.contains(name), "{name} on /metrics:\n{metrics}");
    }
}
