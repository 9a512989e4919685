-- Fencing counters that outlive the data, for every script family (prepended to the lock,
-- permit and queue preludes). A counter below FENCE_FLOOR was never raised to the clock: it is
-- new, it expired (a minute after it was raised, IDLE_MS), or it was lost with the data (a
-- restart without persistence, a failover to a replica that had not received it, an
-- eviction). Its next tokens start at the server's clock in microseconds, so they stay above
-- every token handed out before, unless the key took more than one token per microsecond on
-- average since its counter was last raised. Lua numbers hold integers exactly to 2^53: the
-- clock in µs (about 1.8e15 in 2026) stays below it until the year 2255.
local FENCE_FLOOR = 1099511627776 -- 2^40

-- How long a key made for one lock key (its counter, line, last hold, ...) lives after its
-- last use, in ms: src/store/lifetimes.rs (IDLE_KEY_TTL) says why a minute.
local IDLE_MS = 60000

-- The server's clock in whole microseconds since the epoch.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Hands out `n` tokens from `counter`; returns the last (the first is `last - n + 1`).
local function next_fences(counter, n)
  local last = redis.call('INCRBY', counter, n)
  if last - n + 1 < FENCE_FLOOR then
    local first = math.max(last - n + 1, now_us())
    last = first + n - 1
    -- Raised to the clock, a counter needs no history: it may expire (INCR keeps the TTL),
    -- and its next use raises it again.
    redis.call('SET', counter, string.format('%d', last), 'PX', IDLE_MS)
  end
  return last
end

