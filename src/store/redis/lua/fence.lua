-- Fencing counters that outlive the data, for every script family (prepended to the lock,
-- permit and queue preludes). Every token is at least the server's clock in microseconds:
-- a counter that fell behind the clock is raised to it before it hands out a token. So tokens
-- rise above every earlier one even when the counter went back or was lost: a counter that
-- is new, that expired (a minute after its last raise, IDLE_MS), that was lost with the data
-- (a restart without persistence, an eviction), or that a promoted replica holds as it stood
-- before its replication fell behind (a failover to a replica that lagged). What that needs:
-- the new primary's clock ahead of the old one's last token of the key, i.e. the failover
-- slower than the two servers' clocks disagree, and no key taking more than one token per
-- microsecond on average (a counter runs ahead of the clock only then). Lua numbers hold
-- integers exactly to 2^53: the clock in µs (about 1.8e15 in 2026) stays below it until the
-- year 2255.

-- How long a key made for one lock key (its counter, line, last hold, ...) lives after its
-- last use, in ms: src/store/lifetimes.rs (IDLE_KEY_TTL) says why a minute.
local IDLE_MS = 60000

-- The server's clock in whole microseconds since the epoch, read once per call of the script:
-- a script runs as one step (nothing else runs meanwhile), and each `redis.call` costs Redis
-- (a free permit's acquire read it twice, for its deadline and for its token).
local clock_us
local function now_us()
  if not clock_us then
    local t = redis.call('TIME')
    clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock_us
end

-- Hands out `n` tokens from `counter`, the first at least the server's clock in µs; returns
-- the last (the first is `last - n + 1`).
-- The counter is written to the clock and read in one call (`SET ... GET`): a counter that
-- fell behind the clock, the common case (tokens are the clock unless a key takes more than
-- one a microsecond), costs one call. Raised to the clock, a counter needs no history: it may
-- expire, and its next use raises it again. One that stood ahead of the clock is counted on
-- from (a second call).
local function next_fences(counter, n)
  local now = now_us()
  local last = now + n - 1
  local before = tonumber(redis.call('SET', counter, string.format('%d', last), 'PX', IDLE_MS, 'GET')) or 0
  if before + 1 > now then
    last = before + n
    redis.call('SET', counter, string.format('%d', last), 'PX', IDLE_MS)
  end
  return last
end
