#!lua flags=allow-oom
-- Decides one request against a key's rate (GCRA), by the server's clock, in microseconds.
--
-- The key's state is the time its next slot opens (`free_at`). A request at or after it is
-- admitted and moves it one interval on, from no earlier than `now - tolerance` (an idle key
-- has its burst back); one before it is refused with the time to it. A booking takes the next
-- slot (now, if one is open) and moves the schedule as an admission there would; a job's
-- booking is kept until the job comes, which admits it without counting it again.
--
-- KEYS[1] free_at (string, microseconds), KEYS[2] bookings (zset: job waiter -> slot).
-- ARGV[1] interval (us), ARGV[2] tolerance (us), ARGV[3] '1' to book, '0' to decide,
-- ARGV[4] the job waiter ('' for none), ARGV[5] how long a booking waits for its job (ms).
-- Returns {status, wait (us), slot (us since the epoch)}: status 1 admitted, 2 a booking
-- redeemed, 0 refused (wait: until the next slot), 3 booked.

local free_at_key, bookings_key = KEYS[1], KEYS[2]
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local book = ARGV[3] == '1'
local job = ARGV[4]
local retention_ms = tonumber(ARGV[5])

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- Lua turns numbers into strings with 14 significant digits; microseconds since the epoch
-- have 16. Every number that goes back to Redis as a string goes through this.
local function exact(n)
  return string.format('%.0f', n)
end

if job ~= '' then
  local slot = redis.call('ZSCORE', bookings_key, job)
  if slot then
    slot = tonumber(slot)
    if not book then
      redis.call('ZREM', bookings_key, job)
      return {2, math.max(0, slot - now), slot}
    end
    return {3, math.max(0, slot - now), slot}
  end
end

local free_at = tonumber(redis.call('GET', free_at_key) or '0') or 0
if free_at > now and not book then
  return {0, free_at - now, free_at}
end
local slot = math.max(free_at, now)
local next_free = math.max(free_at, now - tolerance) + interval
-- Past `next_free + tolerance` the state says nothing an absent key would not.
redis.call('SET', free_at_key, exact(next_free), 'PX', exact(math.floor((next_free + tolerance - now) / 1000) + 1))
if not book then
  return {1, 0, slot}
end
if job ~= '' and slot > now then
  redis.call('ZADD', bookings_key, exact(slot), job)
  redis.call('PEXPIRE', bookings_key, exact(math.floor((slot - now) / 1000) + retention_ms))
  -- Bookings whose job never came (deleted, or its schedulers down all that time): a few per
  -- booking, so the set stays bounded by the bookings made.
  local stale = redis.call('ZRANGEBYSCORE', bookings_key, '-inf', exact(now - retention_ms * 1000), 'LIMIT', 0, 8)
  if #stale > 0 then
    redis.call('ZREM', bookings_key, unpack(stale))
  end
end
return {3, slot - now, slot}
