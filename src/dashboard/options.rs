//! What a dashboard shows and allows.

use std::collections::BTreeMap;

/// How a [`Dashboard`](super::Dashboard) runs: its action token (none: read-only), the shard
/// counts of sharded queues, where it is mounted, and its page size.
///
/// ```
/// use redefer::dashboard::DashboardOptions;
///
/// let options = DashboardOptions::default()
///     .token(std::env::var("REDEFER_DASHBOARD_TOKEN").ok())
///     .queue_shards("orders", 4)
///     .mounted_at("/ops/redefer");
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct DashboardOptions {
    pub(super) token: Option<String>,
    pub(super) shards: BTreeMap<String, usize>,
    pub(super) base: String,
    pub(super) page_size: usize,
}

impl Default for DashboardOptions {
    fn default() -> Self {
        DashboardOptions {
            token: None,
            shards: BTreeMap::new(),
            base: String::new(),
            page_size: 50,
        }
    }
}

impl DashboardOptions {
    /// The token the actions need: typed once on the login page (the browser then holds a
    /// session cookie) or sent as `Authorization: Bearer <token>`. `None` (the default) or an
    /// empty token makes the dashboard read-only.
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|token| !token.is_empty());
        self
    }

    /// Whether the actions are off.
    pub fn read_only(&self) -> bool {
        self.token.is_none()
    }

    /// The queue `name` has `count` shards (as its application configured it; 1 otherwise).
    pub fn queue_shards(mut self, name: impl Into<String>, count: usize) -> Self {
        self.shards.insert(name.into(), count.max(1));
        self
    }

    /// The path the router is nested under in the application (`Router::nest`), for the
    /// links the pages hold: `""` (the default) when it is served at the root.
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
