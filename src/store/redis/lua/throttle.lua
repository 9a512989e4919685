#!lua flags=allow-oom
-- Model: ThrottleModel::admit and ThrottleModel::book (src/throttle/model.rs); tests/throttle_model.rs checks the two agree.
-- Decides one request against a key's rate (GCRA), by the server's clock, in microseconds.
--
-- A key keeps two times. `free_at`, the schedule: when its next slot opens, counting every
-- request admitted or booked; a booking takes that slot. `run_free_at`, the runs: the same
-- rate over the times requests actually start, so that booked requests that come late (a busy
-- scheduler) are spaced out again instead of starting in a bunch. A request is admitted now
-- when both have come; a job with a booking, at its slot once the runs allow it.
-- Each time moves one interval per request, from no earlier than `now - tolerance` (an idle key
-- has its burst back).
--
-- KEYS[1] state (read by throttle_prelude.lua), KEYS[2] bookings (zset: waiter -> slot).
-- ARGV[1] interval (us), ARGV[2] tolerance (us), ARGV[3] '1' to book, '0' to decide,
-- ARGV[4] the waiter (a booking's; '' for a request without one), ARGV[5] how long a booking
-- waits for its waiter (ms).
-- Returns {status, wait (us), slot (us since the epoch)}: status 1 admitted now, 2 a booking
-- redeemed (start after wait), 0 refused (wait: until the next slot; for a job sent back to
-- wait for its booked start, until that start), 3 booked.
--
-- Lua turns numbers into strings with 14 significant digits, and microseconds since the epoch
-- have 16: every number that goes back to Redis as a string is formatted with '%.0f'. The
-- steps are written out rather than in local functions: a closure is made anew at every call.

local bookings_key = KEYS[2]
local interval = tonumber(ARGV[1])
local book = ARGV[3] == '1'
local waiter = ARGV[4]

-- The most a job waits for its start within its run (its scheduler's place held all that
-- while); a job told to wait longer goes back to wait in the queue (below).
local MAX_RUN_WAIT_US = 1000000

-- The waiter's booking: redeemed (admitted at its slot, once the runs allow), or found again.
local slot, sent_back = nil, false
if waiter ~= '' then
  slot = redis.call('ZSCORE', bookings_key, waiter)
  if not slot then
    slot = redis.call('ZSCORE', bookings_key, SENT_BACK .. waiter)
    sent_back = slot ~= false
  end
  if slot then
    slot = tonumber(slot)
    if book then
      return {3, math.max(0, slot - now), slot}
    end
    redis.call('ZREM', bookings_key, sent_back and SENT_BACK .. waiter or waiter)
  end
end
-- A job sent back to wait for its start had its run counted then, for that start: on time, it
-- starts then and nothing else moves. Claimed after it, the job finds that run spent (others
-- may have taken the runs after it): it takes a turn now, as a booking does (below).
if sent_back and slot >= now then
  return {2, slot - now, slot}
end

local status, start
if slot then
  status, start = 2, math.max(now, slot, run_free_at)
  -- A job that would wait long in its run (its key closed until an upstream's retry-after,
  -- the runs before it late) would hold its scheduler's place all that while, and slow other
  -- keys: it goes back to wait in the queue, refused until its start, its booking kept for it
  -- there and its run counted now.
  if start - now > MAX_RUN_WAIT_US and string.sub(waiter, 1, 2) == 'j|' then
    status, slot = 4, start
  end
elseif not book then
  local opens = math.max(free_at, run_free_at)
  if opens > now then
    return {0, opens - now, opens}
  end
  status, start = 1, now
  free_at = math.max(free_at, now - tolerance) + interval
else
  if waiter == '' then
    return redis.error_reply('a booking is for a waiter')
  end
  status, slot = 3, math.max(free_at, now)
  free_at = math.max(free_at, now - tolerance) + interval
end
if start then
  run_free_at = math.max(run_free_at, start - tolerance) + interval
end

write_schedule(free_at, run_free_at)

if status == 2 then
  return {2, start - now, slot}
elseif status == 1 then
  return {1, 0, now}
elseif status == 4 then
  local retention_ms = tonumber(ARGV[5])
  redis.call('ZADD', bookings_key, string.format('%.0f', start), SENT_BACK .. waiter)
  redis.call('PEXPIRE', bookings_key, math.floor((start - now) / 1000) + retention_ms)
  return {0, start - now, start}
end
-- A booking is kept even when its slot is open now: the job is stored after this, and takes
-- its slot whenever it comes.
local retention_ms = tonumber(ARGV[5])
redis.call('ZADD', bookings_key, string.format('%.0f', slot), waiter)
redis.call('PEXPIRE', bookings_key, math.floor((slot - now) / 1000) + retention_ms)
-- Bookings whose waiter never came (a deleted job, a caller that died, schedulers down all
-- that time): a few per booking, so the set stays bounded by the bookings made.
local stale = redis.call('ZRANGEBYSCORE', bookings_key, '-inf', string.format('%.0f', now - retention_ms * 1000), 'LIMIT', 0, 8)
if #stale > 0 then
  redis.call('ZREM', bookings_key, unpack(stale))
end
return {3, slot - now, slot}
