-- Model: LockModel (src/lock/model/mod.rs): KeyState::hand_to_head, KeyState::take; tests/lock_model.rs checks the two agree.
-- The prelude of every lock script, prepended to it after its flags line when the scripts are
-- loaded (src/store/redis/scripts.rs). It names the lock's keys, which every lock script
-- receives in this order (src/store/redis/keys.rs builds the list), and the handoff that
-- several scripts share.
local LOCK, FENCE, WAITERS, HANDOFF, HOLDS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- LOCK     string: the holder's token (PX ttl), the token .. LINE_MARK once someone is in line
--          behind the holder, or '@' .. a waiter it is reserved for (PX)
-- FENCE    counter: the last fencing token handed out (expires IDLE_MS after it was raised)
-- WAITERS  zset: waiter -> arrival order; the line, first come first served (expires IDLE_MS
--          after the last join: a waiter comes back within its fallback, 10 s at most)
-- HANDOFF  string: the waiter the key was last reserved for, until it takes it, or leaves the
--          line and joins it again (PX IDLE_MS)
-- HOLDS    string: the key's last hold in ms (expires IDLE_MS after the last release)

-- The pub/sub channel that tells the line who the key was handed to, and how long a
-- reservation lasts: every lock script gets them in ARGV[1] and ARGV[2], its own arguments
-- from ARGV[3].
local WAKE, RESERVATION_MS = ARGV[1], ARGV[2]

-- A holder's value gets this mark when someone joins the line behind it: a release that finds
-- the bare token knows, without looking, that nobody waits (src/store/redis/lock.rs releases
-- it by DELIFEQ where the server has it), and one that finds the mark hands the key over.
local LINE_MARK = '|w'

-- Whether `token` holds the lock, marked or not.
local function held_by(token)
  local current = redis.call('GET', LOCK)
  return current == token or current == token .. LINE_MARK
end

-- Hands the free key to the first in line: reserved for it for RESERVATION_MS, and the line
-- hears who. With `drop_expired`, the waiter whose reservation of the key ran out unused (its
-- claimer died) leaves the line first: the first in line, or the one a set's waiter passed the
-- key to (set_prelude.lua). Without a line, the key is deleted.
-- Returns the waiter reserved for and the waiter dropped ('' for none).
local function hand_to_head(drop_expired)
  local dropped = ''
  if drop_expired then
    local expired = redis.call('GET', HANDOFF)
    if expired and redis.call('ZREM', WAITERS, expired) == 1 then
      dropped = expired
    end
  end
  local head = redis.call('ZRANGE', WAITERS, 0, 0)[1]
  if not head then
    redis.call('DEL', LOCK, HANDOFF)
    return '', dropped
  end
  redis.call('SET', LOCK, '@' .. head, 'PX', RESERVATION_MS)
  redis.call('SET', HANDOFF, head, 'PX', IDLE_MS)
  redis.call('PUBLISH', WAKE, head)
  return head, dropped
end

-- A waiter that comes back to a line it left starts afresh: the key's last handoff, if it was
-- to this waiter, is forgotten (its reservation ran out, or another holder took the key and
-- gave it back by the short release, which leaves HANDOFF as it was), so that the hand-over
-- does not drop it as a waiter whose reservation ran out unused (Waiters::join in the model).
local function forget_old_handoff(waiter)
  if not redis.call('ZSCORE', WAITERS, waiter) and redis.call('GET', HANDOFF) == waiter then
    redis.call('DEL', HANDOFF)
  end
end

-- Takes the key for `token` for `ttl` ms as `waiter` ('' when not in line), which leaves the
-- line; the value carries the line mark when others are still in line behind it. Returns the
-- holding's fencing token.
local function take(token, ttl, waiter)
  if waiter ~= '' then
    redis.call('ZREM', WAITERS, waiter)
    if redis.call('GET', HANDOFF) == waiter then
      redis.call('DEL', HANDOFF)
    end
  end
  local value = token
  if redis.call('EXISTS', WAITERS) == 1 then
    value = token .. LINE_MARK
  end
  redis.call('SET', LOCK, value, 'PX', ttl)
  return next_fences(FENCE, 1)
end
