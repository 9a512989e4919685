-- Model: ThrottleModel (src/throttle/model.rs); tests/throttle_model.rs checks the two agree.
-- The prelude of the throttle's scripts (throttle.lua, throttle_close.lua,
-- throttle_reopen.lua), after their flags line: the server's clock and the key's schedule,
-- read from its state.
--
-- KEYS[1] state: "<free_at>", or "<free_at> <run_free_at>" once they differ (only bookings
-- make them differ), in microseconds since the epoch. ARGV[2] the rate's tolerance (us).
-- Top-level steps where one script needs them: a function is a closure made anew at every
-- call. The state's write is one, as two scripts make it (throttle.lua, throttle_close.lua).

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
-- A time past 2^53 µs (the year 2255; a Lua number's exact integers end there), or not a
-- number at all ('nan', which every comparison passes), was not written by redefer: counted
-- from, it answered "retry after 0" forever, or never refused. The call fails, naming the
-- key; the state is kept for the operator, who deletes it (the key has its burst back).
if not (free_at < 9007199254740992 and run_free_at < 9007199254740992) then
  error({err = 'THROTTLE the throttle state ' .. state_key .. ' holds ' .. state
    .. ', past 2^53 microseconds: not a state redefer wrote; delete it (the key then has its'
    .. ' burst back)'})
end

-- Writes the schedule to the state, kept until its last time passes the tolerance.
local function write_schedule(free, runs)
  local forget = math.floor((math.max(free, runs) + tolerance - now) / 1000) + 1
  if free == runs then
    redis.call('SET', state_key, string.format('%.0f', free), 'PX', forget)
  else
    redis.call('SET', state_key, string.format('%.0f %.0f', free, runs), 'PX', forget)
  end
end

-- The script itself follows.
