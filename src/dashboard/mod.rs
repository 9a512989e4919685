//! The web dashboard: every queue with its counts and last hour, a queue's jobs page by page,
//! one job in full, the held locks, and the actions an operator needs (requeue, cancel, run
//! now, purge dead, pause, resume).
//!
//! Server-rendered HTML and SVG, no script to build. [`Dashboard::router`] is an axum
//! `Router` an application can mount (behind the `dashboard` feature); `redefer dashboard`
//! serves the same pages on its own, on loopback by default.
//!
//! Without a token ([`DashboardOptions::token`]) the dashboard is read-only and readable by
//! anyone who reaches it (keep it on loopback). With one, every page needs a signed-in browser
//! or the token as a bearer header (unless [`DashboardOptions::public_read`]), and actions are
//! POSTs that need the token or a signed-in browser and the page's CSRF field. Sign-ins are
//! limited per client address: serve the router with its connect info, as below, so that the
//! limit sees each client's address.
//!
//! ```no_run
//! use redefer::dashboard::{Dashboard, DashboardOptions};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = redefer::RedisStore::connect("redis://127.0.0.1:6379").await?;
//! let options = DashboardOptions::default().token(std::env::var("REDEFER_DASHBOARD_TOKEN").ok());
//! // Under /redefer (and /redefer/), every link under it.
//! let app = axum::Router::new().merge(Dashboard::new(store, options).nested_at("/redefer"));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```

mod access;
mod actions;
mod api;
mod attempts;
mod html;
mod locks_page;
mod options;
mod pages;
mod plot;
mod problem;
mod shown;
mod sign_in_limit;

use std::sync::Arc;

use axum::Router;
use axum::extract::{NestedPath, Request, State};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::Value;

use self::access::Access;
pub use self::options::DashboardOptions;
pub use self::shown::escape_for_terminal;
use crate::error::KeyError;
use crate::queue::{DelayQueue, QueueOperator, QueueStore};
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
            access: Access::new(&options),
            store,
            options,
        }
    }

    /// The pages and actions, as a router to serve or to nest in an application's.
    pub fn router(self) -> Router {
        let dashboard = Arc::new(self);
        let pages = Router::new()
            .route("/", get(pages::queues::<St>))
            .route("/locks", get(locks_page::locks::<St>))
            .route("/queues/{queue}", get(pages::queue::<St>))
            .route("/queues/{queue}/jobs/{id}", get(pages::job::<St>))
            .route(
                "/queues/{queue}/confirm/purge-dead",
                get(pages::confirm_purge::<St>),
            )
            .route_layer(from_fn_with_state(Arc::clone(&dashboard), readers_only::<St>));
        let api = Router::new()
            .route("/api/queues", get(api::queues::<St>))
            .route("/api/locks", get(api::locks::<St>))
            .route("/api/queues/{queue}", get(api::queue::<St>))
            .route("/api/queues/{queue}/jobs", get(api::jobs::<St>))
            .route("/api/queues/{queue}/groups", get(api::groups::<St>))
            .route("/api/queues/{queue}/jobs/{id}", get(api::job::<St>))
            .route_layer(from_fn_with_state(
                Arc::clone(&dashboard),
                api::readers_only::<St>,
            ))
            .route("/api/queues/{queue}/{action}", post(api::act::<St>));
        Router::new()
            .merge(pages)
            .merge(api)
            .route(
                "/login",
                get(actions::login_page::<St>).post(actions::login::<St>),
            )
            .route("/logout", post(actions::logout::<St>))
            .route("/queues/{queue}/{action}", post(actions::act::<St>))
            .layer(axum::middleware::map_response(access::hardened))
            .layer(from_fn_with_state(Arc::clone(&dashboard), find_mount::<St>))
            .with_state(dashboard)
    }

    /// The pages and actions nested under `mount` (`/admin`), in a router to merge into an
    /// application's: [`router`](Self::router) nested with axum's `nest`, plus the mount with a
    /// trailing slash (`/admin/`, which `nest` does not route), redirected to the mount.
    ///
    /// ```
    /// use redefer::MemoryStore;
    /// use redefer::dashboard::{Dashboard, DashboardOptions};
    ///
    /// let dashboard = Dashboard::new(MemoryStore::new(), DashboardOptions::default());
    /// let app: axum::Router = axum::Router::new().merge(dashboard.nested_at("/admin"));
    /// ```
    pub fn nested_at(self, mount: &str) -> Router {
        let mount = mount.trim_end_matches('/').to_string();
        if mount.is_empty() {
            return self.router();
        }
        let root = mount.clone();
        Router::new().nest(&mount, self.router()).route(
            &format!("{mount}/"),
            get(move || async move { axum::response::Redirect::permanent(&root) }),
        )
    }

    /// The queue `name`, its payloads read as JSON, with the shard count the options give it,
    /// else the one it `registered` with, else 1.
    fn queue(&self, name: &str, registered: Option<usize>) -> Result<QueueOperator<Value, St>, KeyError> {
        let shards = self.options.shards.get(name).copied().or(registered).unwrap_or(1);
        Ok(QueueOperator::new(
            DelayQueue::new(self.store.clone(), name)?.shards(shards)?,
        ))
    }
}

tokio::task_local! {
    /// Where the request found the dashboard mounted (see [`find_mount`]).
    static MOUNT: Arc<str>;
}

/// Where the dashboard is mounted, for the request being answered (see [`find_mount`]).
fn current_base() -> String {
    MOUNT.try_with(|mount| mount.to_string()).unwrap_or_default()
}

impl<St> Dashboard<St> {
    /// Where the dashboard is mounted, for the request being answered: `mounted_at` if set,
    /// else the path axum nested it under, else the root (`""`).
    fn base(&self) -> String {
        MOUNT
            .try_with(|mount| mount.to_string())
            .unwrap_or_else(|_| self.options.base.clone())
    }

    /// A link to `path` under the mount point. The root of a mounted dashboard is the mount
    /// itself (`/admin`, not `/admin/`, which axum's `nest` does not route).
    fn link(&self, path: &str) -> String {
        let base = self.base();
        if path == "/" && !base.is_empty() {
            base
        } else {
            format!("{base}{path}")
        }
    }
}

/// Answers the request with the dashboard's mount point known: `mounted_at` when set, else the
/// path the application nested the router under (axum's `NestedPath`), so that a dashboard
/// nested without `mounted_at` still links within its mount.
async fn find_mount<St>(State(d): State<Arc<Dashboard<St>>>, request: Request, next: Next) -> Response {
    let mount = if d.options.base.is_empty() {
        request
            .extensions()
            .get::<NestedPath>()
            .map(|nested| nested.as_str().trim_end_matches('/').to_string())
            .unwrap_or_default()
    } else {
        d.options.base.clone()
    };
    MOUNT.scope(Arc::from(mount), next.run(request)).await
}

/// Lets a page through to those who may read it, telling it who they are; others get the
/// sign-in form.
async fn readers_only<St: QueueStore + ListLocks + Sync>(
    State(d): State<Arc<Dashboard<St>>>,
    client: attempts::ClientAddress,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(limited) = attempts::bearer_guess(&d, request.headers(), &client) {
        return limited;
    }
    let visitor = d.access.visitor(request.headers());
    if !d.access.may_read(&visitor) {
        return actions::sign_in_first(&d);
    }
    request.extensions_mut().insert(visitor);
    next.run(request).await
}
