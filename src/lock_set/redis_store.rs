//! The set on Redis: one script each over every key of a group
//! (`set_acquire.lua`, `set_join.lua`, `set_leave.lua`), each key bringing the lock's five keys.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::{FromRedisValue, Script, Value};

use super::{HeldKey, LockSetStore, SetAcquisition};
use crate::error::StoreError;
use crate::guard::{LineCap, LineJoin, Waiter};
use crate::key::{LockKey, hash_slot};
use crate::lock::{Fencing, FencingToken, Holders, LockStore, LockToken};
use crate::store::RedisConnection;
use crate::store::RedisStore;
use crate::store::handover::{hand_over, reservation_expired};
use crate::store::redis::keys::LockKeys;
use crate::store::redis::lock::{JoinReply, cap_args, duration};
use crate::store::redis::lossy_text::LossyText;
use crate::store::redis::script_call::ScriptCall;
use crate::store::redis::scripts::{SET_ACQUIRE, SET_JOIN, SET_LEAVE};

/// A set script's {key index, waiter} pairs: the keys it handed over, or whose reservation it
/// found run out.
type KeyWaiters = Vec<(i64, LossyText)>;

/// One value of a script's reply, as `T`.
fn parse<T: FromRedisValue>(value: Option<&Value>) -> Result<T, StoreError> {
    redis::from_redis_value_ref(value.unwrap_or(&Value::Nil)).map_err(|error| StoreError::Redis(error.into()))
}

/// The key a script's 1-based index names among `keys`.
fn key_at(keys: &[LockKey], index: i64) -> Result<&LockKey, StoreError> {
    usize::try_from(index)
        .ok()
        .and_then(|index| index.checked_sub(1))
        .and_then(|index| keys.get(index))
        .ok_or_else(|| StoreError::Protocol(format!("a set script named key {index} of {}", keys.len())))
}

impl<Conn: RedisConnection> RedisStore<Conn> {
    /// A call of a set script on `keys`: each key's five keys in the lock prelude's order, the
    /// first key's channel and the reservation (the prelude's ARGV), the script's own
    /// arguments, then every key's channel (set_prelude.lua).
    fn set_script<'a>(
        &self,
        script: &'a Script,
        keys: &[LockKey],
        args: impl FnOnce(&mut ScriptCall<'a>),
    ) -> ScriptCall<'a> {
        let names: Vec<LockKeys> = keys.iter().map(|key| LockKeys::new(&self.prefix, key)).collect();
        let mut call = ScriptCall::new(script, names.iter().flat_map(LockKeys::in_script_order));
        call.arg(names.first().map_or("", LockKeys::wake))
            .arg(crate::time::ttl_millis(self.reservation));
        args(&mut call);
        for key in &names {
            call.arg(key.wake());
        }
        call
    }

    /// Finishes what a set script's handoffs started: `handed` and `dropped` are its
    /// {key index, waiter} pairs.
    async fn finish_handoffs(&self, keys: &[LockKey], handed: KeyWaiters, dropped: KeyWaiters) {
        for (index, waiter) in dropped {
            if let Ok(key) = key_at(keys, index) {
                reservation_expired(key, waiter.waiter().as_ref());
            }
        }
        for (index, waiter) in handed {
            if let Ok(key) = key_at(keys, index) {
                hand_over(self, key, waiter.waiter()).await;
            }
        }
    }
}

impl<Conn: RedisConnection> LockSetStore for RedisStore<Conn> {
    async fn groups(&self, keys: Vec<LockKey>) -> Result<Vec<Vec<LockKey>>, StoreError> {
        if !self.prepare().await?.cluster {
            return Ok(vec![keys]);
        }
        let mut by_slot: BTreeMap<u16, Vec<LockKey>> = BTreeMap::new();
        for key in keys {
            by_slot.entry(hash_slot(key.as_str())).or_default().push(key);
        }
        Ok(by_slot.into_values().collect())
    }

    async fn acquire_set(
        &self,
        keys: &[LockKey],
        token: LockToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
        fencing: Fencing,
    ) -> Result<SetAcquisition, StoreError> {
        self.prepare().await?;
        let reply: Vec<Value> = self
            .set_script(&SET_ACQUIRE, keys, |script| {
                script
                    .arg(token)
                    .arg(crate::time::ttl_millis(ttl))
                    .arg(waiter.map_or("", Waiter::as_str));
            })
            .invoke(&mut self.conn.clone())
            .await?;
        let status: i64 = parse(reply.first())?;
        if status == 1 {
            let fences: Vec<u64> = parse(reply.get(1))?;
            if fences.len() != keys.len() {
                return Err(StoreError::Protocol(format!(
                    "{} fencing tokens for {} keys",
                    fences.len(),
                    keys.len()
                )));
            }
            for key in keys {
                // The script counted a token on each: their counters are raised now.
                self.counted.insert(key);
            }
            if let Err(error) = self.replicated().await {
                for key in keys {
                    self.release_holding(key, token, Holders::One, None).await?;
                }
                return Err(error);
            }
            let fenced = |fence: u64| (fencing == Fencing::On).then_some(FencingToken(fence));
            return Ok(SetAcquisition::Acquired(fences.into_iter().map(fenced).collect()));
        }
        let blocked: Vec<(i64, i64, i64, i64, i64)> = parse(reply.get(1))?;
        let handed: KeyWaiters = parse(reply.get(2))?;
        let dropped: KeyWaiters = parse(reply.get(3))?;
        self.finish_handoffs(keys, handed, dropped).await;
        let blocked = blocked
            .into_iter()
            .map(|(index, remaining, ahead, hold, reserved)| {
                let at = key_at(keys, index)?;
                let index = keys.iter().position(|key| key == at).unwrap_or_default();
                Ok(HeldKey {
                    index,
                    remaining: duration(remaining),
                    ahead: u64::try_from(ahead).unwrap_or(0),
                    typical_hold: duration(hold),
                    reserved: reserved == 1,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(SetAcquisition::Held(blocked))
    }

    async fn join_set_line(
        &self,
        keys: &[LockKey],
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        cap: Option<LineCap>,
    ) -> Result<LineJoin, StoreError> {
        self.prepare().await?;
        let (max, overflow) = cap_args(cap);
        let (handed, dropped, ahead, refused, evicted): JoinReply<KeyWaiters> = self
            .set_script(&SET_JOIN, keys, |script| {
                script
                    .arg(waiter.as_str())
                    .arg(replacing.map_or("", Waiter::as_str))
                    .arg(max)
                    .arg(overflow);
            })
            .invoke(&mut self.conn.clone())
            .await?;
        if refused == 1 {
            return Ok(LineJoin::Full { waiting: ahead });
        }
        self.finish_handoffs(keys, handed, dropped).await;
        let mut evicted: Vec<Waiter> = evicted.into_iter().filter_map(LossyText::waiter).collect();
        evicted.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        evicted.dedup();
        Ok(LineJoin::Joined { ahead, evicted })
    }

    async fn leave_set_line(&self, keys: &[LockKey], waiter: &Waiter) -> Result<(), StoreError> {
        self.prepare().await?;
        let handed: KeyWaiters = self
            .set_script(&SET_LEAVE, keys, |script| {
                script.arg(waiter.as_str());
            })
            .invoke(&mut self.conn.clone())
            .await?;
        self.finish_handoffs(keys, handed, Vec::new()).await;
        Ok(())
    }
}
