//! The lock operations of the Redis store: one Lua script each, over the lock's keys.

use std::time::Duration;

use redis::{Script, ToRedisArgs};

use super::RedisStore;
use super::keys::{LockKeys, LockName};
use super::lossy_text::LossyText;
use super::script_call::ScriptCall;
use super::scripts::{
    LOCK_ACQUIRE, LOCK_ACQUIRE_NEW, LOCK_EXTEND, LOCK_JOIN, LOCK_LEAVE, LOCK_RELEASE, LOCK_RELEASE_ALONE,
    QUEUE_PROMOTE,
};
use crate::error::StoreError;
use crate::guard::{LineCap, LineJoin, Overflow, Waiter};
use crate::key::LockKey;
use crate::lock::{
    AcquireRequest, Acquisition, FENCE_FLOOR, Fencing, FencingToken, Handoffs, Holders, JoinRequest,
    LockStore, LockToken,
};
use crate::metric_names;
use crate::queue::model::Promotion;
use crate::queue::{JobId, QueueName};
use crate::store::RedisConnection;
use crate::store::handover::{HandOver, hand_over, hand_over_with_runner_up, reservation_expired};
use crate::time::{millis, ttl_millis};

/// The acquire script's reply: status, then (acquired) fence, ms the reservation waited, or
/// (held) remaining ms, waiters ahead, typical hold ms, waiter handed to, waiter dropped,
/// whether reserved. The acquired reply is short: it is the common one.
type AcquireReply = (i64, i64, i64, Option<(i64, String, String, i64)>);

/// The acquire script's reply, as its parts.
fn acquire_reply(reply: Vec<redis::Value>) -> Result<AcquireReply, StoreError> {
    let int = |at: usize| -> Result<i64, StoreError> {
        redis::from_redis_value_ref(reply.get(at).unwrap_or(&redis::Value::Nil))
            .map_err(|error| StoreError::Redis(error.into()))
    };
    // A waiter's name: another tool's member of the line reads as far as it reads.
    let text = |at: usize| -> Result<String, StoreError> {
        match reply.get(at) {
            None | Some(redis::Value::Nil) => Ok(String::new()),
            Some(value) => redis::from_redis_value_ref(value)
                .map(|LossyText(text)| text)
                .map_err(|error| StoreError::Redis(error.into())),
        }
    };
    let held = if reply.len() >= 7 {
        Some((int(3)?, text(4)?, text(5)?, int(6)?))
    } else {
        None
    };
    Ok((int(0)?, int(1)?, int(2)?, held))
}

/// The command `name` with room for `args` arguments of `bytes` in all: an acquire's commands
/// are written without growing their buffers (each grows three times from empty otherwise).
pub(crate) fn command(name: &str, args: usize, bytes: usize) -> redis::Cmd {
    let mut command = redis::Cmd::with_capacity(1 + args, name.len() + bytes);
    command.arg(name);
    command
}

/// A duration from a script's milliseconds; `None` for the -1 (or -2) of "none".
pub(crate) fn duration(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

impl<Conn: RedisConnection> RedisStore<Conn> {
    /// A call of a lock script on `key`: every lock script takes the same keys, in the order
    /// the prelude names them, then the announcement channel and the reservation time.
    fn lock_script<'a>(&self, script: &'a Script, key: &LockKey) -> ScriptCall<'a> {
        let keys = LockKeys::new(&self.prefix, key);
        let mut call = ScriptCall::new(script, keys.in_script_order());
        call.arg(keys.wake()).arg(ttl_millis(self.reservation));
        call
    }

    /// The common acquire, of a caller not in line: plain commands in one round trip, no
    /// script (a script's call costs Redis more than all of them). `EXISTS` of the key's line,
    /// `SET key token NX PX ttl`, and when fenced `INCR` of the key's counter and `GET` of the
    /// lock. `Some` with the fence (if any) when the lock is ours; `None` when the acquire
    /// script must settle it: the key taken, or its line not empty, or a counter to raise.
    ///
    /// The commands need not run as one atomic step. A key taken while others are in line
    /// (its holder's TTL ran out) is given back by token before anyone is told it was ours;
    /// the acquire script then hands it to the first in line. The fence is ours when the `GET`
    /// still finds our token: the lock then held it from the `SET` to the `GET` (nobody else
    /// writes our token), so the `INCR` between them ran while we held the key, after every
    /// earlier holder's own `INCR` (each ran during its hold) and before every later
    /// holder's. `INCR` cannot raise a counter to the clock (`lua/fence.lua`): a key comes
    /// here only while this store saw its counter raised in the last
    /// [`FENCE_RAISE_FRESH`](crate::token::FENCE_RAISE_FRESH)
    /// ([`CountedKeys`](super::counted::CountedKeys)), any other goes to
    /// [`acquire_new`](Self::acquire_new), which raises it in the same round trip. A counter
    /// below the floor was lost since (a restart without persistence): the acquire script
    /// finds our token and hands us a raised one. A full Redis refuses the plain `SET`: the
    /// error sends the caller to the script, which may write then.
    async fn acquire_by_set(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        fencing: Fencing,
    ) -> Result<Option<Option<FencingToken>>, StoreError> {
        let names = LockKeys::only(
            &self.prefix,
            key,
            [LockName::Lock, LockName::Waiters, LockName::Fence],
        );
        let [lock, waiters, counter] = names.get();
        let mut commands = redis::Pipeline::with_capacity(4);
        let mut exists = command("EXISTS", 1, waiters.len());
        exists.arg(waiters);
        let mut set = command("SET", 5, lock.len() + 32 + 8 + 20);
        set.arg(lock).arg(token).arg("NX").arg("PX").arg(ttl_millis(ttl));
        commands.add_command(exists).add_command(set);
        let (line, taken, fence) = match fencing {
            Fencing::Off => {
                let (line, taken): (bool, bool) = commands.query_async(&mut self.conn.clone()).await?;
                (line, taken, None)
            }
            Fencing::On => {
                let mut raise = command("INCR", 1, counter.len());
                raise.arg(counter);
                let mut holder = command("GET", 1, lock.len());
                holder.arg(lock);
                commands.add_command(raise).add_command(holder);
                let (line, taken, fence, holder): (bool, bool, u64, Option<Vec<u8>>) =
                    commands.query_async(&mut self.conn.clone()).await?;
                let ours = holder.as_deref() == Some(&token.to_hex()[..]);
                (line, taken && ours, Some(fence))
            }
        };
        if !taken {
            return Ok(None);
        }
        if line {
            self.release_holding(key, token, Holders::One, None).await?;
            return Ok(None);
        }
        match fence {
            None => Ok(Some(None)),
            Some(fence) if fence >= FENCE_FLOOR => Ok(Some(Some(FencingToken(fence)))),
            Some(_) => Ok(None),
        }
    }

    /// The fenced acquire of a free key whose counter this store has not seen raised
    /// (`lock_acquire_new.lua`): `SET NX PX` unless the key's line is not empty, and the next
    /// fencing token, raising a new counter, in one call on the three keys it touches. `None`
    /// when the key is taken or its line not empty: the acquire script settles it.
    async fn acquire_new(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> Result<Option<Option<FencingToken>>, StoreError> {
        let names = LockKeys::only(
            &self.prefix,
            key,
            [LockName::Lock, LockName::Fence, LockName::Waiters],
        );
        let [lock, counter, waiters] = names.get();
        let fence: i64 = ScriptCall::new(&LOCK_ACQUIRE_NEW, [lock, counter, waiters])
            .arg(token)
            .arg(ttl_millis(ttl))
            .invoke(&mut self.conn.clone())
            .await?;
        if fence < 0 {
            return Ok(None);
        }
        self.counted.insert(key);
        Ok(Some(Some(FencingToken(fence.unsigned_abs()))))
    }

    /// One acquire: by `SET NX` when the caller is not in line, else (or on a conflict) by
    /// the acquire script.
    async fn acquire(&self, key: &LockKey, request: AcquireRequest<'_>) -> Result<Acquisition, StoreError> {
        let AcquireRequest {
            token,
            ttl,
            waiter,
            fencing,
        } = request;
        // A waiter's acquire goes to the script, which knows its place in line.
        if waiter.is_none() {
            // A fenced acquire of a key not seen counted yet: the short script that raises its
            // new counter, in one round trip where the plain commands would take two.
            let free_key = if fencing == Fencing::Off || self.counted.contains(key) {
                self.acquire_by_set(key, token, ttl, fencing).await
            } else {
                self.acquire_new(key, token, ttl).await
            };
            match free_key {
                Ok(Some(fence)) => {
                    self.await_replicas(key, token).await?;
                    return Ok(Acquisition::Acquired(fence));
                }
                Ok(None) => {}
                // Lost on the way: the full script decides, and finds our token should the
                // free-key acquire have landed.
                Err(error) => {
                    tracing::debug!(%key, %error, "acquire of a free key failed; acquiring by the full script")
                }
            }
        }
        let reply: Vec<redis::Value> = self
            .lock_script(&LOCK_ACQUIRE, key)
            .arg(token)
            .arg(ttl_millis(ttl))
            .arg(waiter.map_or("", Waiter::as_str))
            .invoke(&mut self.conn.clone())
            .await?;
        let (status, first, second, held) = acquire_reply(reply)?;
        match (status, held) {
            (1, _) => {
                // The script counted a token: the key's counter is raised now.
                self.counted.insert(key);
                let fence = u64::try_from(first)
                    .map_err(|_| StoreError::Protocol(format!("negative fencing token {first}")))?;
                if let Some(waited) = duration(second) {
                    metric_names::handoff_taken(waited);
                }
                self.await_replicas(key, token).await?;
                Ok(Acquisition::Acquired(request.fenced(Some(FencingToken(fence)))))
            }
            (0, Some((hold, handed, dropped, reserved))) => {
                reservation_expired(key, Waiter::from_stored(dropped).as_ref());
                hand_over(self, key, Waiter::from_stored(handed)).await;
                Ok(Acquisition::Held {
                    remaining: duration(first),
                    ahead: u64::try_from(second).unwrap_or(0),
                    typical_hold: duration(hold),
                    reserved: reserved == 1,
                })
            }
            (other, _) => Err(StoreError::Protocol(format!("acquire answered status {other}"))),
        }
    }

    /// Calls a short release (`lock_release_alone.lua`, `permit_release_alone.lua`) on the
    /// holder's `keys` for `holder`, passing the key's last hold in `holds` only when there is
    /// one to report (each key and argument costs the call). `Some(released)`; `None` when
    /// someone is in line: the full release hands over then.
    pub(crate) async fn release_alone(
        &self,
        script: &Script,
        keys: &[&str],
        holder: impl ToRedisArgs,
        holds: &str,
        held_for: Option<Duration>,
    ) -> Result<Option<bool>, StoreError> {
        let reported = held_for.map(|held| (holds, millis(held).to_string()));
        let mut release = ScriptCall::new(
            script,
            keys.iter()
                .copied()
                .chain(reported.as_ref().map(|(holds, _)| *holds)),
        );
        release.arg(holder);
        if let Some((_, held)) = &reported {
            release.arg(held);
        }
        let alone: i64 = release.invoke(&mut self.conn.clone()).await?;
        Ok(match alone {
            1 => Some(true),
            0 => Some(false),
            _ => None,
        })
    }

    /// With [`wait_for_replicas`](RedisStore::wait_for_replicas): waits for the replicas, and
    /// gives the lock back when too few acknowledged it.
    async fn await_replicas(&self, key: &LockKey, token: LockToken) -> Result<(), StoreError> {
        if let Err(error) = self.replicated().await {
            self.release_holding(key, token, Holders::One, None).await?;
            return Err(error);
        }
        Ok(())
    }
}

impl<Conn: RedisConnection> RedisStore<Conn> {
    pub(super) async fn acquire_lock(
        &self,
        key: &LockKey,
        request: AcquireRequest<'_>,
    ) -> Result<Acquisition, StoreError> {
        self.after_releases(key, || self.acquire(key, request)).await
    }

    /// An acquire of `key` (a lock's or a permit's), made once the store is ready. A release
    /// of the key on its way as the acquire goes out may reach the server after it (the
    /// connection's queue being full): found held then, tried again once the release is
    /// answered.
    pub(crate) async fn after_releases<F: Future<Output = Result<Acquisition, StoreError>>>(
        &self,
        key: &LockKey,
        acquire: impl Fn() -> F,
    ) -> Result<Acquisition, StoreError> {
        // A store over a connection of the user's loads its scripts with its first acquire, so
        // that the release to come is one request.
        self.prepare().await?;
        let releasing = self.releasing.pending(key);
        let acquisition = acquire().await?;
        if releasing && matches!(acquisition, Acquisition::Held { .. }) {
            self.releasing.settled(key).await;
            return acquire().await;
        }
        Ok(acquisition)
    }

    pub(super) async fn extend_lock(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        // The server's own SET IFEQ, where it has it: resets the TTL of the bare token. Not
        // set (another holder, or the line mark): the script decides.
        if self.conditional().set_ifeq {
            let set: Option<String> = redis::cmd("SET")
                .arg(LockKeys::only(&self.prefix, key, [LockName::Lock]).get()[0])
                .arg(token)
                .arg("IFEQ")
                .arg(token)
                .arg("PX")
                .arg(ttl_millis(ttl))
                .query_async(&mut self.conn.clone())
                .await?;
            if set.is_some() {
                return Ok(true);
            }
        }
        let extended: bool = self
            .lock_script(&LOCK_EXTEND, key)
            .arg(token)
            .arg(ttl_millis(ttl))
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(extended)
    }

    pub(super) async fn release_lock(
        &self,
        key: &LockKey,
        token: LockToken,
        held_for: Option<Duration>,
    ) -> Result<bool, StoreError> {
        // On its way from the first poll: an acquire of the key meanwhile waits for its answer.
        let _on_its_way = self.releasing.start(key);
        let names = LockKeys::only(&self.prefix, key, [LockName::Lock, LockName::Holds]);
        let [lock, holds] = names.get();
        // The server's own DELIFEQ, where it has it: deletes the bare token (nobody in line).
        // A hold to report, another holder or a line mark: the scripts below.
        if self.conditional().delifeq && held_for.is_none() {
            let deleted: Result<i64, _> = redis::cmd("DELIFEQ")
                .arg(lock)
                .arg(token)
                .query_async(&mut self.conn.clone())
                .await;
            if deleted? == 1 {
                return Ok(true);
            }
        }
        if let Some(released) = self
            .release_alone(&LOCK_RELEASE_ALONE, &[lock], token, holds, held_for)
            .await?
        {
            return Ok(released);
        }
        // Someone is in line: the release that hands the key over.
        let held_ms = held_for.map(millis).map_or(String::new(), |ms| ms.to_string());
        let (released, handed, runner_up): (bool, LossyText, LossyText) = self
            .lock_script(&LOCK_RELEASE, key)
            .arg(token)
            .arg(held_ms)
            .invoke(&mut self.conn.clone())
            .await?;
        let (handed, runner_up) = (handed.waiter(), runner_up.waiter());
        hand_over_with_runner_up(self, key, handed, runner_up, self.reservation).await;
        Ok(released)
    }

    pub(super) async fn join_lock_line(
        &self,
        key: &LockKey,
        request: JoinRequest<'_>,
    ) -> Result<LineJoin, StoreError> {
        let (max, overflow) = cap_args(request.cap);
        let (handed, dropped, ahead, refused, evicted): JoinReply<LossyText> = self
            .lock_script(&LOCK_JOIN, key)
            .arg(request.waiter.as_str())
            .arg(request.replacing.map_or("", Waiter::as_str))
            .arg(max)
            .arg(overflow)
            .invoke(&mut self.conn.clone())
            .await?;
        if refused == 1 {
            return Ok(LineJoin::Full { waiting: ahead });
        }
        reservation_expired(key, dropped.waiter().as_ref());
        hand_over(self, key, handed.waiter()).await;
        Ok(LineJoin::Joined {
            ahead,
            evicted: evicted.into_iter().filter_map(LossyText::waiter).collect(),
        })
    }

    pub(super) async fn leave_lock_line(&self, key: &LockKey, waiter: &Waiter) -> Result<(), StoreError> {
        let next = self.pass_on(key, waiter).await?;
        hand_over(self, key, next).await;
        Ok(())
    }

    pub(super) fn lock_handoffs(&self, key: &LockKey) -> Handoffs {
        self.announced_on(LockKeys::new(&self.prefix, key).wake().to_string())
    }
}

impl<Conn: RedisConnection> HandOver for RedisStore<Conn> {
    async fn promote(&self, queue: &QueueName, id: &JobId, after: Duration) -> Result<Promotion, StoreError> {
        let found: i64 = self
            .queue_script(&QUEUE_PROMOTE, queue)
            .arg(id.as_str())
            .arg(millis(after))
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(match found {
            1 => Promotion::Promoted,
            2 => Promotion::Running,
            _ => Promotion::Gone,
        })
    }

    async fn pass_on(&self, key: &LockKey, waiter: &Waiter) -> Result<Vec<Waiter>, StoreError> {
        let handed: LossyText = self
            .lock_script(&LOCK_LEAVE, key)
            .arg(waiter.as_str())
            .invoke(&mut self.conn.clone())
            .await?;
        Ok(handed.waiter().into_iter().collect())
    }
}

/// A join script's reply: the waiters handed the key (`T`: one, or a list for permits), the
/// waiters dropped, the waiters ahead (all, when refused), 1 when refused, the waiters evicted.
pub(crate) type JoinReply<T> = (T, T, u64, i64, Vec<LossyText>);

/// A line cap as the join scripts read it: the most waiters ('-1' none), and what a full line does.
pub(crate) fn cap_args(cap: Option<LineCap>) -> (i64, &'static str) {
    match cap {
        None => (-1, "refuse"),
        Some(LineCap { max, overflow }) => (
            i64::try_from(max).unwrap_or(i64::MAX),
            match overflow {
                Overflow::RefuseNewest => "refuse",
                Overflow::DropOldest => "drop",
            },
        ),
    }
}
