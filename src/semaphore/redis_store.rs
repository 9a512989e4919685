//! The semaphore on Redis: a Lua script per operation over the semaphore's keys, and plain
//! commands for the first permit of a free key (a key of its own, as the mutex's lock).

use std::io::Write;
use std::time::Duration;

use redis::{RedisWrite, Script, ToRedisArgs};

use crate::error::StoreError;
use crate::guard::{LineJoin, Waiter};
use crate::key::LockKey;
use crate::lock::{AcquireRequest, Acquisition, FencingToken, Handoffs, Holders, JoinRequest, LockToken};
use crate::metric_names;
use crate::queue::model::Promotion;
use crate::queue::{JobId, QueueName};
use crate::store::RedisConnection;
use crate::store::RedisStore;
use crate::store::handover::{HandOver, hand_over, reservation_expired};
use crate::store::list_locks::LockInfo;
use crate::store::redis::keys::{PermitKeys, PermitName};
use crate::store::redis::listed_replies::ListedReplies;
use crate::store::redis::lock::{JoinReply, cap_args, command};
use crate::store::redis::locks::key_name;
use crate::store::redis::lossy_text::LossyText;
use crate::store::redis::script_call::ScriptCall;
use crate::store::redis::scripts::{
    LOCK_RELEASE_ALONE, PERMIT_ACQUIRE, PERMIT_ACQUIRE_FREE, PERMIT_EXTEND, PERMIT_JOIN, PERMIT_LEAVE,
    PERMIT_RELEASE, PERMIT_RELEASE_ALONE,
};
use crate::time::{millis, ttl_millis};
use crate::token::FENCE_FLOOR;

/// The acquire script's reply: status, three numbers (fence, ms waited; or remaining ms,
/// waiters ahead, typical hold ms), whether only reservations stand in the way, the waiters
/// permits were reserved for, the waiters dropped.
type AcquireReply = (i64, i64, i64, i64, i64, Vec<LossyText>, Vec<LossyText>);

/// A duration from a script's milliseconds; `None` for the -1 of "none".
fn duration(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// A permit's holder as the scripts name it: its token, a writer's after the writer's mark
/// (`lua/permit_prelude.lua`).
struct HolderName(LockToken, Holders);

impl HolderName {
    /// The value of the key's first permit when this holder takes it: its name, `|`, the
    /// limit (`lua/permit_prelude.lua`, FIRST).
    fn first_permit(&self) -> Vec<u8> {
        let HolderName(token, holders) = self;
        let mut value = Vec::with_capacity(33 + 11);
        if holders.writes() {
            value.push(b'!');
        }
        value.extend_from_slice(&token.to_hex());
        // The limit's digits, written in place (writing to a Vec cannot fail).
        let _ = write!(value, "|{}", holders.limit());
        value
    }
}

impl ToRedisArgs for HolderName {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        let HolderName(token, holders) = self;
        if holders.writes() {
            let mut name = [b'!'; 33];
            name[1..].copy_from_slice(&token.to_hex());
            out.write_arg(&name);
        } else {
            out.write_arg(&token.to_hex());
        }
    }
}

/// What the plain commands of a first permit found ([`RedisStore::acquire_first_permit`]).
enum FirstPermit {
    /// The permit is ours, with this fence.
    Ours(u64),
    /// Others hold permits: the first permit, or entries of the set (the one just taken is
    /// given back).
    Busy,
    /// A script must settle it: others in line (the permit just taken is given back), or a
    /// counter below the floor (the acquire script finds the permit ours and raises it).
    Unsettled,
}

/// Waiters as a script lists them.
fn waiters(stored: Vec<LossyText>) -> impl Iterator<Item = Waiter> {
    stored.into_iter().filter_map(LossyText::waiter)
}

impl<Conn: RedisConnection> RedisStore<Conn> {
    /// A call of a permit script on `key`: every permit script takes the same keys, in the
    /// order the prelude names them, then the announcement channel and the reservation time.
    fn permit_script<'a>(&self, script: &'a Script, key: &LockKey) -> ScriptCall<'a> {
        let keys = PermitKeys::new(&self.prefix, key);
        let mut call = ScriptCall::new(script, keys.in_script_order());
        call.arg(keys.wake()).arg(ttl_millis(self.reservation));
        call
    }

    /// After a script reserved permits and dropped waiters: logs the dropped, wakes the
    /// reserved (a job waiter's job is made due).
    async fn permits_handed(
        &self,
        key: &LockKey,
        permits: u32,
        handed: Vec<LossyText>,
        dropped: Vec<LossyText>,
    ) {
        for waiter in waiters(dropped) {
            reservation_expired(key, Some(&waiter));
        }
        let line = PermitLine { store: self, permits };
        hand_over(&line, key, waiters(handed)).await;
    }

    /// The first permit of a free key by plain commands in one round trip, as the mutex's
    /// acquire takes its key (`store/redis/lock.rs`): `EXISTS` of the line, `SET first
    /// <holder>|<limit> NX PX ttl`, `ZCARD` of the permits, `INCR` of the counter and `GET` of
    /// the first permit. What it found: [`FirstPermit`].
    ///
    /// The commands need not run as one step. The first permit counts as a holder in every
    /// script; one taken while others held or waited is given back before anyone is told it
    /// was ours, and nobody joins the permits' set while it exists without counting it. The
    /// fence is ours when the `GET` still finds our permit: the `INCR` ran while we held it
    /// (the mutex's argument). Only for keys whose counter this store saw raised a moment ago
    /// (`counted_permits`): `INCR` cannot raise it to the clock (`lua/fence.lua`).
    async fn acquire_first_permit(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        holders: Holders,
    ) -> Result<FirstPermit, StoreError> {
        let names = PermitKeys::only(
            &self.prefix,
            key,
            [
                PermitName::Waiters,
                PermitName::First,
                PermitName::Permits,
                PermitName::Fence,
            ],
        );
        let [waiters, first, permits, counter] = names.get();
        let value = HolderName(token, holders).first_permit();
        // Each command sized before it is written, as the mutex's acquire (`command`).
        let mut commands = redis::Pipeline::with_capacity(5);
        let mut line = command("EXISTS", 1, waiters.len());
        line.arg(waiters);
        let mut take = command("SET", 5, first.len() + value.len() + 8 + 20);
        take.arg(first)
            .arg(&value)
            .arg("NX")
            .arg("PX")
            .arg(ttl_millis(ttl));
        let mut others = command("ZCARD", 1, permits.len());
        others.arg(permits);
        let mut count = command("INCR", 1, counter.len());
        count.arg(counter);
        let mut check = command("GET", 1, first.len());
        check.arg(first);
        for each in [line, take, others, count, check] {
            commands.add_command(each);
        }
        let (line, taken, entries, fence, now_first): (bool, bool, u64, u64, Option<Vec<u8>>) =
            commands.query_async(&mut self.conn.clone()).await?;
        if !taken {
            return Ok(FirstPermit::Busy);
        }
        if now_first.as_deref() != Some(&value[..]) {
            return Ok(FirstPermit::Unsettled);
        }
        if line || entries > 0 {
            // Given back as taken, by value (the token-checked delete of the mutex's short
            // release): nothing else changed, and the script that decides next hands the line
            // what is free.
            let given_back = self
                .release_alone(&LOCK_RELEASE_ALONE, &[first], &value[..], "", None)
                .await?;
            if given_back.is_none() {
                // Someone joined the line since the `GET` and marked the permit: the release
                // script gives it back and hands the line what is free.
                self.release_permit_lease(key, token, holders, None).await?;
            }
            return Ok(if line {
                FirstPermit::Unsettled
            } else {
                FirstPermit::Busy
            });
        }
        Ok(if fence >= FENCE_FLOOR {
            FirstPermit::Ours(fence)
        } else {
            FirstPermit::Unsettled
        })
    }

    /// The acquire of a caller not in line on a key nobody waits for
    /// (`permit_acquire_free.lua`): only the keys it touches, and none of the bookkeeping of
    /// contention. `None` when the full acquire script must decide (someone in line, the key
    /// full or a writer in the way), or when the call failed: the full script then finds our
    /// permit should this one have landed.
    async fn acquire_free_permit(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        holders: Holders,
    ) -> Option<u64> {
        let names = PermitKeys::only(
            &self.prefix,
            key,
            [
                PermitName::Permits,
                PermitName::Fences,
                PermitName::Fence,
                PermitName::Waiters,
                PermitName::Limit,
                PermitName::First,
            ],
        );
        let taken: Result<i64, _> = ScriptCall::new(&PERMIT_ACQUIRE_FREE, names.get())
            .arg(HolderName(token, holders))
            .arg(ttl_millis(ttl))
            .arg(holders.limit())
            .invoke(&mut self.conn.clone())
            .await;
        match taken {
            Ok(fence) => {
                let fence = u64::try_from(fence).ok()?;
                self.counted_permits.insert(key);
                Some(fence)
            }
            Err(error) => {
                tracing::debug!(%key, %error, "acquire of a free permit failed; acquiring by the full script");
                None
            }
        }
    }

    /// An acquire of a caller not in line, on a key not in use: its first permit by plain
    /// commands where the store may (the key's counter raised a moment ago, the key not found
    /// busy a moment ago), else by the free-key script. `None` when the full script must
    /// decide.
    async fn acquire_permit_without_line(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        holders: Holders,
    ) -> Option<u64> {
        if self.counted_permits.contains(key) && !self.busy_permits.contains(key) {
            match self.acquire_first_permit(key, token, ttl, holders).await {
                Ok(FirstPermit::Ours(fence)) => return Some(fence),
                // The free-key script may still find a permit beside the others, and is tried
                // first for a moment.
                Ok(FirstPermit::Busy) => self.busy_permits.insert(key),
                Ok(FirstPermit::Unsettled) => return None,
                Err(error) => {
                    tracing::debug!(%key, %error, "acquire of a first permit failed; acquiring by the full script");
                    return None;
                }
            }
        }
        self.acquire_free_permit(key, token, ttl, holders).await
    }

    async fn acquire_permit(
        &self,
        key: &LockKey,
        holders: Holders,
        request: AcquireRequest<'_>,
    ) -> Result<Acquisition, StoreError> {
        let AcquireRequest {
            token, ttl, waiter, ..
        } = request;
        if waiter.is_none()
            && let Some(fence) = self.acquire_permit_without_line(key, token, ttl, holders).await
        {
            return self.permit_acquired(key, holders, fence, request).await;
        }
        let permits = holders.limit();
        let (status, first, second, hold, only_reserved, handed, dropped): AcquireReply = self
            .permit_script(&PERMIT_ACQUIRE, key)
            .arg(HolderName(token, holders))
            .arg(ttl_millis(ttl))
            .arg(permits)
            .arg(waiter.map_or("", Waiter::as_str))
            .invoke(&mut self.conn.clone())
            .await?;
        self.permits_handed(key, permits, handed, dropped).await;
        match status {
            1 => {
                // The script counted a token: the key's counter is raised now.
                self.counted_permits.insert(key);
                let fence = u64::try_from(first)
                    .map_err(|_| StoreError::Protocol(format!("negative fencing token {first}")))?;
                if let Some(waited) = duration(second) {
                    metric_names::handoff_taken(waited);
                }
                self.permit_acquired(key, holders, fence, request).await
            }
            0 => Ok(Acquisition::Held {
                remaining: duration(first),
                ahead: u64::try_from(second).unwrap_or(0),
                // A permit comes free about every typical hold / permits.
                typical_hold: duration(hold).map(|hold| hold / permits.max(1)),
                reserved: only_reserved == 1,
            }),
            other => Err(StoreError::Protocol(format!(
                "permit acquire answered status {other}"
            ))),
        }
    }

    /// A permit taken with `fence`: once enough replicas have it (with
    /// [`wait_for_replicas`](RedisStore::wait_for_replicas)), the caller's; else given back.
    async fn permit_acquired(
        &self,
        key: &LockKey,
        holders: Holders,
        fence: u64,
        request: AcquireRequest<'_>,
    ) -> Result<Acquisition, StoreError> {
        if let Err(error) = self.replicated().await {
            self.release_permit_lease(key, request.token, holders, None)
                .await?;
            return Err(error);
        }
        Ok(Acquisition::Acquired(request.fenced(Some(FencingToken(fence)))))
    }
}

impl<Conn: RedisConnection> RedisStore<Conn> {
    pub(crate) async fn acquire_permit_in_line(
        &self,
        key: &LockKey,
        holders: Holders,
        request: AcquireRequest<'_>,
    ) -> Result<Acquisition, StoreError> {
        self.after_releases(key, || self.acquire_permit(key, holders, request))
            .await
    }

    pub(crate) async fn extend_permit_lease(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        holders: Holders,
    ) -> Result<bool, StoreError> {
        let extended: bool = self
            .permit_script(&PERMIT_EXTEND, key)
            .arg(HolderName(token, holders))
            .arg(ttl_millis(ttl))
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(extended)
    }

    pub(crate) async fn release_permit_lease(
        &self,
        key: &LockKey,
        token: LockToken,
        holders: Holders,
        held_for: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let _on_its_way = self.releasing.start(key);
        // Nobody in line, the common case: the short release; else the full one hands over.
        let names = PermitKeys::only(
            &self.prefix,
            key,
            [
                PermitName::Permits,
                PermitName::Fences,
                PermitName::Waiters,
                PermitName::First,
                PermitName::Holds,
            ],
        );
        let [permits, fences, waiters, first, holds] = names.get();
        let holder = HolderName(token, holders);
        // The server's own DELIFEQ, where it has it: deletes the first permit by value while
        // nobody is in line (the line marks it), as the mutex's release deletes its token. Not
        // tried for a key found busy a moment ago: its permits are more likely entries of the
        // set, which the script below gives back.
        if self.conditional().delifeq && held_for.is_none() && !self.busy_permits.contains(key) {
            let deleted: i64 = redis::cmd("DELIFEQ")
                .arg(first)
                .arg(holder.first_permit())
                .query_async(&mut self.conn.clone())
                .await?;
            if deleted == 1 {
                return Ok(true);
            }
        }
        let held = [permits, fences, waiters, first];
        let alone = self.release_alone(&PERMIT_RELEASE_ALONE, &held, holder, holds, held_for);
        if let Some(released) = alone.await? {
            return Ok(released);
        }
        let held_ms = held_for.map(millis).map_or(String::new(), |ms| ms.to_string());
        let permits = holders.limit();
        let (released, handed, dropped): (bool, Vec<LossyText>, Vec<LossyText>) = self
            .permit_script(&PERMIT_RELEASE, key)
            .arg(HolderName(token, holders))
            .arg(held_ms)
            .arg(permits)
            .invoke(&mut self.conn.clone())
            .await?;
        self.permits_handed(key, permits, handed, dropped).await;
        Ok(released)
    }

    pub(crate) async fn join_permit_line(
        &self,
        key: &LockKey,
        holders: Holders,
        request: JoinRequest<'_>,
    ) -> Result<LineJoin, StoreError> {
        let (max, overflow) = cap_args(request.cap);
        let permits = holders.limit();
        let (handed, dropped, ahead, refused, evicted): JoinReply<Vec<LossyText>> = self
            .permit_script(&PERMIT_JOIN, key)
            .arg(request.waiter.as_str())
            .arg(request.replacing.map_or("", Waiter::as_str))
            .arg(permits)
            .arg(max)
            .arg(overflow)
            .arg(if holders.writes() { "1" } else { "" })
            .invoke(&mut self.conn.clone())
            .await?;
        if refused == 1 {
            return Ok(LineJoin::Full { waiting: ahead });
        }
        self.permits_handed(key, permits, handed, dropped).await;
        Ok(LineJoin::Joined {
            ahead,
            evicted: waiters(evicted).collect(),
        })
    }

    pub(crate) async fn leave_permit_line(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        holders: Holders,
    ) -> Result<(), StoreError> {
        let line = PermitLine {
            store: self,
            permits: holders.limit(),
        };
        let handed = line.pass_on(key, waiter).await?;
        hand_over(&line, key, handed).await;
        Ok(())
    }

    pub(crate) fn permit_line_handoffs(&self, key: &LockKey) -> Handoffs {
        self.announced_on(PermitKeys::new(&self.prefix, key).wake().to_string())
    }
}

/// A semaphore's line, for a handoff: a waiter whose job is gone leaves the line, and the
/// permit reserved for it goes to the next.
struct PermitLine<'a, Conn> {
    store: &'a RedisStore<Conn>,
    permits: u32,
}

impl<Conn: RedisConnection> HandOver for PermitLine<'_, Conn> {
    async fn promote(&self, queue: &QueueName, id: &JobId, after: Duration) -> Result<Promotion, StoreError> {
        self.store.promote(queue, id, after).await
    }

    async fn pass_on(&self, key: &LockKey, waiter: &Waiter) -> Result<Vec<Waiter>, StoreError> {
        let handed: Vec<LossyText> = self
            .store
            .permit_script(&PERMIT_LEAVE, key)
            .arg(waiter.as_str())
            .arg(self.permits)
            .invoke(&mut self.store.conn.clone())
            .await?;
        Ok(waiters(handed).collect())
    }
}

/// How many of a semaphore's entries a listing reads for its reservations.
const MAX_RESERVATIONS_SHOWN: isize = 63;

impl<Conn: RedisConnection> RedisStore<Conn> {
    /// The semaphore at `key` (its permits), whose hash tag is `tag`; `None` once every
    /// permit ran out. Its remaining time is the last deadline among its permits.
    pub(crate) async fn describe_semaphore(
        &self,
        key: &str,
        tag: &str,
    ) -> Result<Option<LockInfo>, StoreError> {
        let found = PermitKeys::of_found_tag(&self.prefix, tag);
        let mut replies = ListedReplies::query(
            redis::pipe()
                .pttl(key)
                .get(found.fence())
                .zcard(found.waiters())
                .hlen(found.fences())
                .get(found.limit())
                .zrange(key, 0, MAX_RESERVATIONS_SHOWN)
                .scard(found.writers())
                .get(found.first())
                .pttl(found.first()),
            &mut self.conn.clone(),
        )
        .await?;
        let pttl: i64 = replies.next("its TTL").unwrap_or(-1);
        let fence: Option<u64> = replies.next("its fencing counter").flatten();
        let waiters: u64 = replies.next("its line").unwrap_or(0);
        let holders: u64 = replies.next("its permits' fencing tokens").unwrap_or(0);
        let limit: Option<u64> = replies.next("its limit").flatten();
        let entries: Vec<String> = replies.next("its permits").unwrap_or_default();
        let writers_waiting: u64 = replies.next("its writers in line").unwrap_or(0);
        let first: Option<String> = replies.next("its first permit").flatten();
        let first_pttl: i64 = replies.next("its first permit's TTL").unwrap_or(-2);
        // The first permit (`<holder>|<limit>`, then `|w` once someone joined the line)
        // counts as a holder; it runs out with its key.
        let mut first_parts = first.as_deref().map(|first| first.split('|'));
        let first_holder = first_parts.as_mut().and_then(Iterator::next);
        let first_limit = first_parts
            .as_mut()
            .and_then(Iterator::next)
            .and_then(|limit| limit.parse::<u64>().ok());
        let pttl = if first_holder.is_some() {
            pttl.max(first_pttl)
        } else {
            pttl
        };
        let holders = holders + u64::from(first_holder.is_some());
        if pttl == -2 && waiters == 0 {
            return Ok(None);
        }
        let reserved: Vec<&str> = entries
            .iter()
            .filter_map(|entry| entry.strip_prefix('@'))
            .collect();
        Ok(Some(LockInfo {
            key: key_name(key, tag),
            remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
            fence: fence.unwrap_or(0),
            waiters,
            holders,
            limit: limit
                .or(first_limit)
                .and_then(crate::store::list_locks::listed_limit),
            reserved_for: (!reserved.is_empty()).then(|| reserved.join(" ")),
            // A writer holds alone: its entry or the first permit, marked
            // (lua/permit_prelude.lua), is the one.
            writing: first_holder.is_some_and(|holder| holder.starts_with('!'))
                || entries.iter().any(|entry| entry.starts_with('!')),
            writers_waiting,
            next_slot: None,
            closed_for: None,
            unreadable: replies.unreadable(),
        }))
    }
}
