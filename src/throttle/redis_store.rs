//! The throttle on Redis: each operation one call of `store/redis/lua/throttle.lua` (or
//! `throttle_close.lua`, `throttle_reopen.lua`).

use std::time::{Duration, SystemTime};

use super::model::MAX_REOPENED_WAITERS;
use super::{Admission, BOOKING_RETENTION, Booking, Rate, ThrottleStore};
use crate::error::StoreError;
use crate::guard::Waiter;
use crate::key::LockKey;
use crate::store::RedisConnection;
use crate::store::RedisStore;
use crate::store::list_locks::LockInfo;
use crate::store::redis::keys::ThrottleKeys;
use crate::store::redis::listed_replies::{ListedReplies, excerpt};
use crate::store::redis::locks::key_name;
use crate::store::redis::script_call::ScriptCall;
use crate::store::redis::scripts::{THROTTLE, THROTTLE_CLOSE, THROTTLE_REOPEN};
use crate::time::millis;

/// The script's reply: status, microseconds to wait, the slot in microseconds since the epoch.
type ThrottleReply = (i64, i64, i64);

/// Microseconds as a duration (none for a negative count).
fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

impl<Conn: RedisConnection> RedisStore<Conn> {
    async fn throttle_script(
        &self,
        key: &LockKey,
        rate: Rate,
        book: bool,
        waiter: Option<&Waiter>,
    ) -> Result<ThrottleReply, StoreError> {
        let keys = ThrottleKeys::new(&self.prefix, key);
        let reply = ScriptCall::new(&THROTTLE, [keys.state.as_str(), keys.bookings.as_str()])
            .arg(u64::try_from(rate.interval().as_micros()).unwrap_or(u64::MAX))
            .arg(u64::try_from(rate.tolerance().as_micros()).unwrap_or(u64::MAX))
            .arg(if book { "1" } else { "0" })
            .arg(waiter.map_or("", Waiter::as_str))
            .arg(millis(BOOKING_RETENTION))
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(reply)
    }
}

impl<Conn: RedisConnection> ThrottleStore for RedisStore<Conn> {
    async fn admit(
        &self,
        key: &LockKey,
        rate: Rate,
        booked_as: Option<&Waiter>,
    ) -> Result<Admission, StoreError> {
        self.prepare().await?;
        match self.throttle_script(key, rate, false, booked_as).await? {
            (1, _, _) => Ok(Admission::Admitted),
            (2, wait, _) => Ok(Admission::Redeemed { wait: micros(wait) }),
            (0, wait, _) => Ok(Admission::Throttled {
                opens_in: micros(wait),
            }),
            (status, _, _) => Err(StoreError::Protocol(format!("throttle answered status {status}"))),
        }
    }

    async fn book(&self, key: &LockKey, rate: Rate, waiter: &Waiter) -> Result<Booking, StoreError> {
        self.prepare().await?;
        match self.throttle_script(key, rate, true, Some(waiter)).await? {
            (3, wait, slot) => Ok(Booking {
                at: SystemTime::UNIX_EPOCH + micros(slot),
                wait: micros(wait),
            }),
            (status, _, _) => Err(StoreError::Protocol(format!(
                "throttle booking answered status {status}"
            ))),
        }
    }

    async fn close_for(&self, key: &LockKey, rate: Rate, duration: Duration) -> Result<Duration, StoreError> {
        self.prepare().await?;
        let keys = ThrottleKeys::new(&self.prefix, key);
        let opens_in: i64 = ScriptCall::new(&THROTTLE_CLOSE, [keys.state.as_str(), keys.closed.as_str()])
            .arg(u64::try_from(rate.interval().as_micros()).unwrap_or(u64::MAX))
            .arg(u64::try_from(rate.tolerance().as_micros()).unwrap_or(u64::MAX))
            .arg(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX))
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(micros(opens_in))
    }

    async fn reopen(&self, key: &LockKey) -> Result<Option<Duration>, StoreError> {
        self.prepare().await?;
        let keys = ThrottleKeys::new(&self.prefix, key);
        let opens_in: i64 = ScriptCall::new(
            &THROTTLE_REOPEN,
            [keys.state.as_str(), keys.closed.as_str(), keys.bookings.as_str()],
        )
        .arg(MAX_REOPENED_WAITERS)
        .invoke(&mut self.conn.clone())
        .await?;
        Ok((opens_in >= 0).then(|| micros(opens_in)))
    }
}

impl<Conn: RedisConnection> RedisStore<Conn> {
    /// The throttled key at `key` (its schedule), whose hash tag is `tag`; `None` once its
    /// schedule is no longer ahead of the clock.
    pub(crate) async fn describe_throttle(
        &self,
        key: &str,
        tag: &str,
    ) -> Result<Option<LockInfo>, StoreError> {
        let found = ThrottleKeys::of_found_tag(&self.prefix, tag);
        let mut replies = ListedReplies::query(
            redis::pipe()
                .pttl(key)
                .get(key)
                .zcard(&found.bookings)
                .get(&found.closed)
                .cmd("TIME"),
            &mut self.conn.clone(),
        )
        .await?;
        let pttl: i64 = replies.next("its TTL").unwrap_or(-1);
        // `None`: not a string; `Some(None)`: gone since the scan.
        let state: Option<Option<Vec<u8>>> = replies.next("its schedule");
        let booked: u64 = replies.next("its bookings").unwrap_or(0);
        let closing: Option<String> = replies.next("its closing").flatten();
        let time: (u64, u64) = replies
            .next("the server's clock")
            .ok_or_else(|| StoreError::Protocol(format!("no TIME beside {key}")))?;
        if state == Some(None) {
            return Ok(None);
        }
        let now = time.0.saturating_mul(1_000_000).saturating_add(time.1);
        // `<free_at>`, or `<free_at> <run_free_at>`: the next slot opens when both have come.
        let opens_at = state.flatten().and_then(|state| {
            let times = std::str::from_utf8(&state).ok().and_then(|text| {
                text.split(' ')
                    .map(|part| part.parse::<u64>().ok())
                    .collect::<Option<Vec<u64>>>()
            });
            let opens_at = times.and_then(|times| times.into_iter().max());
            if opens_at.is_none() {
                replies.note(format!("its schedule holds {:?}", excerpt(&state)));
            }
            opens_at
        });
        let mut info = LockInfo::throttled(
            key_name(key, tag),
            u64::try_from(pttl).ok().map(Duration::from_millis),
            booked,
            Duration::from_micros(opens_at.unwrap_or(now).saturating_sub(now)),
            // `<until> <free_at> <run_free_at>` (lua/throttle_close.lua; 0.4 kept `<until>`).
            closing
                .and_then(|closing| closing.split(' ').next()?.parse::<u64>().ok())
                .filter(|until| *until > now)
                .map(|until| Duration::from_micros(until - now)),
        );
        info.unreadable = replies.unreadable();
        Ok(Some(info))
    }
}
