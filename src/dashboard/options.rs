//! What a dashboard shows and allows.

use std::collections::BTreeMap;
use std::time::Duration;

/// How a [`Dashboard`](super::Dashboard) runs: its token (none: read-only, and readable by
/// anyone who reaches it), who may read, its sessions, the shard counts of sharded queues,
/// where it is mounted, and its page size.
///
/// ```
/// use std::time::Duration;
/// use redefer::dashboard::DashboardOptions;
///
/// let options = DashboardOptions::default()
///     .token(std::env::var("REDEFER_DASHBOARD_TOKEN").ok())
///     .queue_shards("orders", 4)
///     .mounted_at("/ops/redefer")
///     .served_over_https(true)
///     .session_ttl(Duration::from_secs(8 * 3600));
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct DashboardOptions {
    pub(super) token: Option<String>,
    pub(super) shards: BTreeMap<String, usize>,
    pub(super) base: String,
    pub(super) page_size: usize,
    pub(super) actions: bool,
    pub(super) public_read: bool,
    pub(super) served_over_https: bool,
    pub(super) session_ttl: Duration,
    pub(super) sign_ins_per_minute: u32,
}

impl Default for DashboardOptions {
    fn default() -> Self {
        DashboardOptions {
            token: None,
            shards: BTreeMap::new(),
            base: String::new(),
            page_size: 50,
            actions: true,
            public_read: false,
            served_over_https: false,
            session_ttl: Duration::from_secs(12 * 3600),
            sign_ins_per_minute: 10,
        }
    }
}

impl DashboardOptions {
    /// The token that signs a browser in (typed once on the login page; the browser then holds
    /// a session cookie) or that scripts send as `Authorization: Bearer <token>`. With one,
    /// every page needs it (or a session), unless [`public_read`](Self::public_read), and the
    /// actions need it always. `None` (the default) or an empty token makes the dashboard
    /// read-only and readable by anyone who reaches it: keep such a dashboard on loopback.
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|token| !token.is_empty());
        self
    }

    /// Turns the actions off, token or not (the token still guards reading).
    pub fn without_actions(mut self) -> Self {
        self.actions = false;
        self
    }

    /// Whether a token is set.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Whether the actions are off.
    pub fn read_only(&self) -> bool {
        self.token.is_none() || !self.actions
    }

    /// Lets anyone read the pages of a dashboard with a token (default: off, since payloads
    /// may carry personal data); the actions still need the token.
    pub fn public_read(mut self, public: bool) -> Self {
        self.public_read = public;
        self
    }

    /// The dashboard is served over HTTPS (itself or behind a proxy): the session cookie is
    /// marked `Secure`, so a browser never sends it over plain HTTP.
    pub fn served_over_https(mut self, https: bool) -> Self {
        self.served_over_https = https;
        self
    }

    /// How long a sign-in lasts (default 12 hours); signing out ends it sooner.
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = ttl;
        self
    }

    /// How many sign-in attempts and requests with a wrong bearer token one client address may
    /// make a minute (default 10; at least 1): past them, `429 Too Many Requests` with
    /// `Retry-After`, the token not even compared. The address is the
    /// connection's (serve the router with `into_make_service_with_connect_info::<SocketAddr>`;
    /// without it, every client shares one limit). IPv6 clients are counted per /64.
    pub fn sign_ins_per_minute(mut self, attempts: u32) -> Self {
        self.sign_ins_per_minute = attempts.max(1);
        self
    }

    /// The queue `name` has `count` shards (as its application configured it; 1 otherwise).
    pub fn queue_shards(mut self, name: impl Into<String>, count: usize) -> Self {
        self.shards.insert(name.into(), count.max(1));
        self
    }

    /// The path the router is nested under in the application (`Router::nest`), for the
    /// links the pages hold. Optional: nested without it, the dashboard finds its mount from
    /// axum's `NestedPath`; set it when a proxy strips a prefix axum never sees.
    pub fn mounted_at(mut self, base: impl Into<String>) -> Self {
        self.base = base.into().trim_end_matches('/').to_string();
        self
    }

    /// How many jobs a page of a set lists (default 50, at most 1,000).
    pub fn page_size(mut self, jobs: usize) -> Self {
        self.page_size = jobs.clamp(1, crate::queue::MAX_PAGE);
        self
    }
}
