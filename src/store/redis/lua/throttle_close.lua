#!lua flags=allow-oom
-- Model: ThrottleModel::close (src/throttle/model.rs); tests/throttle_model.rs checks the two agree.
-- Closes a key until ARGV[3] microseconds from now, by the server's clock (an upstream said
-- "retry after"): its next slot opens then, no earlier, for requests and bookings alike, and
-- the slots after it follow at the key's rate (the bookings already made start no earlier
-- either, spaced at the rate). A schedule already later than that stays as it is.
-- KEYS[1] state (see throttle_prelude.lua), KEYS[2] closed (string: "<until> <free_at>
-- <run_free_at>", until when, and the key's two times when its closing began, in us since the
-- epoch: the listing reads the first, a reopening (throttle_reopen.lua) all three; it expires
-- at <until>).
-- ARGV[1] unused (the interval, in the throttle's argument order), ARGV[2] the tolerance
-- (us), ARGV[3] how long to close the key (us).
-- Returns the microseconds until the key's next slot opens.
local closed_key = KEYS[2]
local until_at = now + tonumber(ARGV[3])

-- Closed already: the times its first closing found are kept. 0.4 kept "<until>" alone: the
-- times are not known then (0: a reopening takes back all that the closings added).
local closed_until, free_before, runs_before = 0, free_at, run_free_at
local closed = redis.call('GET', closed_key)
if closed then
  local known, free, runs = string.match(closed, '^(%d+) (%d+) (%d+)$')
  known = tonumber(known) or tonumber(closed) or 0
  if known > now then
    closed_until, free_before, runs_before = known, tonumber(free) or 0, tonumber(runs) or 0
  end
end
closed_until = math.max(closed_until, until_at)

free_at = math.max(free_at, until_at)
run_free_at = math.max(run_free_at, until_at)
write_schedule(free_at, run_free_at)
local closed_ms = math.floor((closed_until - now) / 1000) + 1
local closing = string.format('%.0f %.0f %.0f', closed_until, free_before, runs_before)
redis.call('SET', closed_key, closing, 'PX', closed_ms)
return math.max(free_at, run_free_at) - now
