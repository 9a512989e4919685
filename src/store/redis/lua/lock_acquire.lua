#!lua flags=allow-oom
-- Model: LockModel::acquire (src/lock/model/mod.rs); tests/lock_model.rs checks the two agree.
-- Takes a lock unless another holder has it, or a reservation for another waiter, or others
-- are in line first; hands out the next fencing token. Runs when Redis is full: pushes are
-- refused first, so that deferred work can still drain (see scripts.rs).
-- ARGV[3] the holder's token, ARGV[4] the TTL in ms, ARGV[5] the caller's place in line
-- ('' when it is not in line).
-- Returns {1, fencing token, ms the reservation waited for us (-1: none)} when the lock is ours; {0, remaining ms (-1: no TTL), waiters ahead, typical hold ms (-1: unknown),
-- waiter the key was just handed to (''), waiter dropped for an expired reservation (''),
-- 1 when the key is reserved for a waiter rather than held} when held.
local token, ttl, waiter = ARGV[3], ARGV[4], ARGV[5]
-- The common case first, in the fewest calls: a free key with nobody in line.
if redis.call('SET', LOCK, token, 'NX', 'PX', ttl) then
  if redis.call('EXISTS', WAITERS) == 0 then
    -- A waiter the key was once handed to takes it now: that handoff is over (as take() ends
    -- it), or its record would drop the waiter from the line when it joins again.
    if waiter ~= '' and redis.call('GET', HANDOFF) == waiter then
      redis.call('DEL', HANDOFF)
    end
    return {1, next_fences(FENCE, 1), -1}
  end
  -- Free, but with a line (a holder's TTL ran out): the rules below decide whose it is.
  redis.call('DEL', LOCK)
end
local current = redis.call('GET', LOCK)
if current == token or current == token .. LINE_MARK then
  -- The lock is already ours: an acquire re-sent after its reply was lost, or the common
  -- acquire (plain commands, src/store/redis/lock.rs) that took the key but could not count
  -- its token (a counter never raised to the clock). A new token, counted now, while we hold
  -- the key: above every earlier holder's, even when the first acquire's commands ran only in
  -- part (its SET without its INCR), and below every later holder's.
  redis.call('PEXPIRE', LOCK, ttl)
  return {1, next_fences(FENCE, 1), -1}
end
-- The key is not ours. The plain commands that sent us here (src/store/redis/lock.rs) may
-- have counted the counter anyway: one that had expired came back without a TTL, and would
-- outlive its key.
local function keep_counter()
  redis.call('PEXPIRE', FENCE, IDLE_MS)
end

local waited = -1
if not current then
  local head = redis.call('ZRANGE', WAITERS, 0, 0)[1]
  if head and head ~= waiter then
    -- Free, but others came first: the key is theirs. Nobody handed it over (the holder's
    -- TTL ran out, or the reservation of the first in line did): hand it over now.
    local reserved, dropped = hand_to_head(true)
    -- Nobody left in line (the one whose reservation ran out was dropped): the key is ours.
    if reserved ~= '' and reserved ~= waiter then
      keep_counter()
      local hold = tonumber(redis.call('GET', HOLDS)) or -1
      return {0, tonumber(RESERVATION_MS), ahead_of(waiter), hold, reserved, dropped, 1}
    end
  end
elseif waiter ~= '' and current == '@' .. waiter then
  waited = tonumber(RESERVATION_MS) - redis.call('PTTL', LOCK)
else
  keep_counter()
  local hold = tonumber(redis.call('GET', HOLDS)) or -1
  local reserved = string.sub(current, 1, 1) == '@' and 1 or 0
  return {0, redis.call('PTTL', LOCK), ahead_of(waiter), hold, '', '', reserved}
end
return {1, take(token, ttl, waiter), waited}
