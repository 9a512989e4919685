-- Model: ThrottleModel (src/throttle/model.rs); tests/throttle_model.rs checks the two agree.
-- The prelude of the throttle's scripts (throttle.lua, throttle_close.lua,
-- throttle_reopen.lua), after their flags line: the server's clock and the key's schedule,
-- read from its state.
--
-- KEYS[1] state: "<free_at>", or "<free_at> <run_free_at>" once they differ (only bookings
-- make them differ), in microseconds since the epoch. ARGV[2] the rate's tolerance (us).
-- Top-level steps, not functions: a closure would be made anew at every call.

local state_key = KEYS[1]
local tolerance = tonumber(ARGV[2])
-- What starts the booking of a job sent back to wait for its start, its run already counted
-- (throttle.lua sends it back, throttle_reopen.lua gives the run back).
local SENT_BACK = '>'

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

local free_at, run_free_at = 0, 0
local state = redis.call('GET', state_key)
if state then
  local single = tonumber(state)
  if single then
    free_at, run_free_at = single, single
  else
    local a, b = string.match(state, '^(%d+) (%d+)$')
    free_at, run_free_at = tonumber(a) or 0, tonumber(b) or 0
  end
end

-- The script itself follows.
