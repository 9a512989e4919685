#!lua flags=allow-oom
-- Model: ThrottleModel::close (src/throttle/model.rs); tests/throttle_model.rs checks the two agree.
-- Closes a key until ARGV[3] microseconds from now, by the server's clock (an upstream said
-- "retry after"): its next slot opens then, no earlier, for requests and bookings alike, and
-- the slots after it follow at the key's rate (the bookings already made start no earlier
-- either, spaced at the rate). A schedule already later than that stays as it is.
-- KEYS[1] state (see throttle_prelude.lua), KEYS[2] closed (string: until when, in us since
-- the epoch, for operators' tools; it expires then).
-- ARGV[1] unused (the interval, in the throttle's argument order), ARGV[2] the tolerance
-- (us), ARGV[3] how long to close the key (us).
-- Returns the microseconds until the key's next slot opens.
local closed_key = KEYS[2]
local until_at = now + tonumber(ARGV[3])

free_at = math.max(free_at, until_at)
run_free_at = math.max(run_free_at, until_at)
local forget = math.floor((math.max(free_at, run_free_at) + tolerance - now) / 1000) + 1
if free_at == run_free_at then
  redis.call('SET', state_key, string.format('%.0f', free_at), 'PX', forget)
else
  redis.call('SET', state_key, string.format('%.0f %.0f', free_at, run_free_at), 'PX', forget)
end
local closed_ms = math.floor((until_at - now) / 1000) + 1
local known = tonumber(redis.call('GET', closed_key))
if not known or known < until_at then
  redis.call('SET', closed_key, string.format('%.0f', until_at), 'PX', closed_ms)
end
return math.max(free_at, run_free_at) - now
