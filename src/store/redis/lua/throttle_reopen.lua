#!lua flags=allow-oom
-- Model: ThrottleModel::reopen (src/throttle/model.rs); tests/throttle_model.rs checks the two agree.
-- Reopens a closed key (an operator's call: the upstream is back), as if its closing had ended
-- now: each of its times moves back by what the closing still held it, and no earlier than the
-- schedule the closing found (the rate's bound holds across the reopening). Slots already
-- booked keep their times. The jobs the closing sent back to wait had their runs counted for
-- then: those runs are given back (each job holds a booking at its start again, counted when it
-- starts), so that the runs move back with the rest; past ARGV[1] bookings from the closing's
-- end on, the runs stay where they are (bounded work).
-- KEYS[1] state (see throttle_prelude.lua), KEYS[2] closed (see throttle_close.lua), KEYS[3]
-- bookings (see throttle.lua).
-- ARGV[1] how many bookings to look at. The prelude's tolerance (ARGV[2]) is not used: the
-- schedule's expiry moves back with it.
-- Returns the microseconds until the key's next slot opens, or -1 when it is not closed.
local closed_key = KEYS[2]
local bookings_key = KEYS[3]
local limit = tonumber(ARGV[1])

local closed = redis.call('GET', closed_key)
if not closed then
  return -1
end
local closed_until, free_before, runs_before = string.match(closed, '^(%d+) (%d+) (%d+)$')
-- 0.4 kept "<until>" alone: the times its closing found are not known (0).
closed_until = tonumber(closed_until) or tonumber(closed) or 0
free_before, runs_before = tonumber(free_before) or 0, tonumber(runs_before) or 0
redis.call('DEL', closed_key)
if closed_until <= now then
  return -1
end

local waiting = redis.call('ZRANGE', bookings_key, string.format('%.0f', closed_until), '+inf', 'BYSCORE',
  'LIMIT', 0, limit + 1, 'WITHSCORES')
for i = 1, math.min(#waiting, 2 * limit), 2 do
  local member = waiting[i]
  if string.sub(member, 1, 1) == SENT_BACK then
    redis.call('ZREM', bookings_key, member)
    redis.call('ZADD', bookings_key, waiting[i + 1], string.sub(member, 2))
  end
end

local opened_at = math.max(free_at, run_free_at)
free_at = math.max(now, free_at - (math.max(free_before, closed_until) - math.max(free_before, now)))
if #waiting <= 2 * limit then
  run_free_at = math.max(now, run_free_at - (math.max(runs_before, closed_until) - math.max(runs_before, now)))
end
local opens_at = math.max(free_at, run_free_at)
local ttl = redis.call('PTTL', state_key)
if ttl ~= -2 then
  local schedule = string.format('%.0f %.0f', free_at, run_free_at)
  if free_at == run_free_at then
    schedule = string.format('%.0f', free_at)
  end
  if ttl == -1 then
    -- Kept without an expiry (an operator's PERSIST, a test's steered clock): it stays so.
    redis.call('SET', state_key, schedule)
  else
    -- The schedule's key expired a tolerance after its next slot: it still does.
    local forget = math.max(1, ttl - math.floor((opened_at - opens_at) / 1000))
    redis.call('SET', state_key, schedule, 'PX', forget)
  end
end
return opens_at - now
