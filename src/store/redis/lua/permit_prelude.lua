-- The prelude of every permit script (a semaphore: up to a limit of holders per key),
-- prepended to it after its flags line when the scripts are loaded (src/store/redis/scripts.rs).
-- It names the semaphore's keys, which every permit script receives in this order
-- (src/store/redis/keys.rs builds the list), and the steps several scripts share.
local PERMITS, FENCES, FENCE, LIMIT, WAITERS, HOLDS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- PERMITS  zset: holder token -> lease deadline, '@' .. waiter -> reservation deadline (ms,
--          server clock); both count against the limit
-- FENCES   hash: holder token -> the fencing token of its permit
-- FENCE    counter: the last fencing token handed out
-- LIMIT    string: the limit the last acquire asked for, for operators' tools (PX its TTL)
-- WAITERS  zset: waiter -> arrival order; the line, first come first served
-- HOLDS    string: the key's last hold in ms (expires IDLE_MS after the last release)

-- The pub/sub channel that tells the line who a permit was reserved for, and how long a
-- reservation lasts: every permit script gets them in ARGV[1] and ARGV[2], its own arguments
-- from ARGV[3].
local WAKE, RESERVATION_MS = ARGV[1], tonumber(ARGV[2])

-- The most expired permits one call drops, and the most permits it reserves: bounded work
-- per call (the rest goes at the next).
local MAX_STEPS = 64

-- The server's clock in ms: deadlines never depend on a client's clock.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Drops the permits and reservations whose deadline passed: a dead holder's permit is free
-- from its deadline on, never before; a reservation that ran out unused takes its waiter out
-- of the line. Returns the waiters dropped.
local function prune(now)
  local expired = redis.call('ZRANGE', PERMITS, '-inf', now, 'BYSCORE', 'LIMIT', 0, MAX_STEPS)
  local dropped = {}
  for _, member in ipairs(expired) do
    redis.call('ZREM', PERMITS, member)
    if string.sub(member, 1, 1) == '@' then
      local waiter = string.sub(member, 2)
      redis.call('ZREM', WAITERS, waiter)
      dropped[#dropped + 1] = waiter
    else
      redis.call('HDEL', FENCES, member)
    end
  end
  return dropped
end

-- The semaphore's keys live as long as their last deadline, `ms` from now at least: a key
-- nobody touches again is gone after its last holder's TTL.
local function keep_alive(ms)
  for _, key in ipairs({PERMITS, FENCES}) do
    if redis.call('PTTL', key) < ms then
      redis.call('PEXPIRE', key, ms)
    end
  end
end

-- Reserves the free permits of `limit` for the first in line that have none yet, each for
-- RESERVATION_MS, and tells the line who. Returns the waiters reserved for.
local function hand_to_line(now, limit)
  local handed = {}
  local free = math.min(limit - redis.call('ZCARD', PERMITS), MAX_STEPS)
  if free <= 0 then
    return handed
  end
  -- At most limit - free permits are reserved, so the first `limit` waiters hold `free`
  -- without a reservation (when the line is that long).
  for _, waiter in ipairs(redis.call('ZRANGE', WAITERS, 0, limit - 1)) do
    if free == 0 then
      break
    end
    local member = '@' .. waiter
    if not redis.call('ZSCORE', PERMITS, member) then
      redis.call('ZADD', PERMITS, now + RESERVATION_MS, member)
      redis.call('PUBLISH', WAKE, waiter)
      handed[#handed + 1] = waiter
      free = free - 1
    end
  end
  if #handed > 0 then
    keep_alive(RESERVATION_MS)
  end
  return handed
end
