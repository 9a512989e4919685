//! A queue's activity per minute, as its store counts it: what the dashboard plots.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Whether a queue's scripts keep its per-minute activity counters (what the dashboard
/// plots): on by default. Off, claims, acks, retries and burials skip them and save their
/// share of each job's Redis time (BENCHMARKS.md measures it); the dashboard says so instead
/// of plotting. Set per queue handle ([`DelayQueue::count_activity`](super::DelayQueue::count_activity),
/// `[queue] activity = "off"`); a scheduler records its handle's choice in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Counters {
    /// Count each claim, ack, retry and burial by minute.
    #[default]
    On,
    /// Count nothing.
    Off,
}

impl Counters {
    /// How the scripts receive it.
    pub(crate) fn as_arg(self) -> &'static str {
        match self {
            Counters::On => "1",
            Counters::Off => "0",
        }
    }
}

/// How many minutes of activity a store keeps.
pub const ACTIVITY_MINUTES: u64 = 60;

/// What happened on a queue in one minute of the store's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MinuteActivity {
    /// The minute's start.
    #[serde(with = "humantime_serde")]
    pub minute: SystemTime,
    /// Jobs claimed.
    pub claimed: u64,
    /// Jobs acknowledged: finished.
    pub done: u64,
    /// Failed attempts put back to wait for another.
    pub failed: u64,
    /// Runs put back without using an attempt (their lock was held, or the store failed).
    pub postponed: u64,
    /// Jobs moved to the dead-letter set.
    pub dead: u64,
    /// Deferrals that joined their key's waiting job instead of adding one
    /// ([`Coalesce`](crate::strategy::Coalesce), [`DebounceLayer`](crate::debounce::DebounceLayer)).
    pub coalesced: u64,
    /// Waiting jobs dropped from a full line for a newer request (buried; counted in `dead` too).
    pub superseded: u64,
    /// The sum over the claimed jobs of how late each was claimed after it was due, in ms.
    pub lag_total_ms: u64,
    /// The latest claim after due, in ms.
    pub lag_max_ms: u64,
}

impl MinuteActivity {
    /// The mean lag of the minute's claims.
    pub fn lag_mean(&self) -> Option<Duration> {
        (self.claimed > 0).then(|| Duration::from_millis(self.lag_total_ms / self.claimed))
    }

    /// No activity yet in `minute` (ms since the epoch / 60,000).
    pub(crate) fn starting(minute: u64) -> Self {
        MinuteActivity {
            minute: start_of(minute).unwrap_or(SystemTime::UNIX_EPOCH),
            claimed: 0,
            done: 0,
            failed: 0,
            postponed: 0,
            dead: 0,
            coalesced: 0,
            superseded: 0,
            lag_total_ms: 0,
            lag_max_ms: 0,
        }
    }

    /// Adds `other`'s counts (another shard's same minute) to these.
    pub(crate) fn merge(&mut self, other: &MinuteActivity) {
        self.claimed += other.claimed;
        self.done += other.done;
        self.failed += other.failed;
        self.postponed += other.postponed;
        self.dead += other.dead;
        self.coalesced += other.coalesced;
        self.superseded += other.superseded;
        self.lag_total_ms += other.lag_total_ms;
        self.lag_max_ms = self.lag_max_ms.max(other.lag_max_ms);
    }

    /// Adds `count` to the counter `name`; unknown names are ignored (a newer writer's).
    pub(crate) fn add(&mut self, name: &str, count: u64) {
        let counter = match name {
            "claimed" => &mut self.claimed,
            "done" => &mut self.done,
            "failed" => &mut self.failed,
            "postponed" => &mut self.postponed,
            "dead" => &mut self.dead,
            "coalesced" => &mut self.coalesced,
            "superseded" => &mut self.superseded,
            "lag_ms" => &mut self.lag_total_ms,
            "lag_max_ms" => {
                self.lag_max_ms = self.lag_max_ms.max(count);
                return;
            }
            _ => return,
        };
        *counter = counter.saturating_add(count);
    }

    /// The minutes of an activity hash as read from a store (`<minute>:<counter>` -> count,
    /// `minute` -> the minute last written): values that are not counts are skipped, as are
    /// fields that name no minute.
    pub(crate) fn from_hash(fields: &[(String, String)]) -> Vec<MinuteActivity> {
        let latest = fields
            .iter()
            .find(|(name, _)| name == "minute")
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(0);
        MinuteActivity::from_fields(
            fields
                .iter()
                .filter_map(|(name, value)| Some((name.as_str(), value.parse().ok()?))),
            latest,
        )
    }

    /// The minutes in a store's `<minute>:<counter>` fields, oldest first, those more than
    /// [`ACTIVITY_MINUTES`] before `latest` left out. Fields that do not parse are skipped:
    /// the hash is outside bytes.
    pub(crate) fn from_fields<'a>(
        fields: impl IntoIterator<Item = (&'a str, u64)>,
        latest: u64,
    ) -> Vec<MinuteActivity> {
        let mut minutes: BTreeMap<u64, MinuteActivity> = BTreeMap::new();
        for (field, count) in fields {
            let Some((minute, name)) = field.split_once(':') else {
                continue;
            };
            let Ok(minute) = minute.parse::<u64>() else {
                continue;
            };
            // Out of the hour before `latest`, or a minute no clock can reach (written by
            // another client): skipped.
            if minute.saturating_add(ACTIVITY_MINUTES) <= latest
                || minute > latest
                || start_of(minute).is_none()
            {
                continue;
            }
            minutes
                .entry(minute)
                .or_insert_with(|| MinuteActivity::starting(minute))
                .add(name, count);
        }
        minutes.into_values().collect()
    }
}

/// When `minute` (ms since the epoch / 60,000) starts, if a `SystemTime` can hold it.
fn start_of(minute: u64) -> Option<SystemTime> {
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(minute.checked_mul(60)?))
}
