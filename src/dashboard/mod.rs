//! The web dashboard: every queue with its counts and last hour, a queue's jobs page by page,
//! one job in full, the held locks, and the actions an operator needs (requeue, cancel, run
//! now, purge dead, pause, resume).
//!
//! Server-rendered HTML and SVG, no script to build. [`Dashboard::router`] is an axum
//! `Router` an application can mount (behind the `dashboard` feature); `redefer dashboard`
//! serves the same pages on its own, on loopback by default.
//!
//! Actions are off unless a token is set ([`DashboardOptions::token`]); with one, they are
//! POSTs that need a signed-in browser and the page's CSRF field, or the token as a bearer
//! header (see the `access` module's notes).
//!
//! ```no_run
//! use redefer::dashboard::{Dashboard, DashboardOptions};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = redefer::RedisStore::connect("redis://127.0.0.1:6379").await?;
//! let options = DashboardOptions::default()
//!     .token(std::env::var("REDEFER_DASHBOARD_TOKEN").ok())
//!     .mounted_at("/redefer");
//! let app = axum::Router::new().nest("/redefer", Dashboard::new(store, options).router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```

mod access;
mod actions;
mod html;
mod options;
mod pages;
mod plot;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use serde_json::Value;

use self::access::Access;
pub use self::options::DashboardOptions;
use crate::error::KeyError;
use crate::queue::{DelayQueue, QueueStore};
use crate::store::ListLocks;

/// The dashboard over one store: build it, then serve or mount its [`router`](Self::router).
#[derive(Debug)]
pub struct Dashboard<St> {
    store: St,
    options: DashboardOptions,
    access: Access,
}

impl<St> Dashboard<St>
where
    St: QueueStore + ListLocks + Sync,
{
    /// A dashboard over the queues and locks of `store`, under its prefix.
    pub fn new(store: St, options: DashboardOptions) -> Self {
        Dashboard {
            access: Access::new(options.token.clone()),
            store,
            options,
        }
    }

    /// The pages and actions, as a router to serve or to nest in an application's.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(pages::queues::<St>))
            .route("/locks", get(pages::locks::<St>))
            .route("/queues/{queue}", get(pages::queue::<St>))
            .route("/queues/{queue}/jobs/{id}", get(pages::job::<St>))
            .route(
                "/queues/{queue}/confirm/purge-dead",
                get(pages::confirm_purge::<St>),
            )
            .route(
                "/login",
                get(actions::login_page::<St>).post(actions::login::<St>),
            )
            .route("/queues/{queue}/{action}", post(actions::act::<St>))
            .layer(axum::middleware::map_response(access::hardened))
            .with_state(Arc::new(self))
    }

    /// The queue `name`, its payloads read as JSON, with the shard count the options give it,
    /// else the one it `registered` with, else 1.
    fn queue(&self, name: &str, registered: Option<usize>) -> Result<DelayQueue<Value, St>, KeyError> {
        let shards = self.options.shards.get(name).copied().or(registered).unwrap_or(1);
        DelayQueue::new(self.store.clone(), name)?.shards(shards)
    }

    /// A link to `path` under the mount point.
    fn link(&self, path: &str) -> String {
        format!("{}{path}", self.options.base)
    }
}
