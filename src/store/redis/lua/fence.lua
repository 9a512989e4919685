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

-- The first token a script cannot count exactly (2^53, a Lua number's exact integers): a
-- counter at or past it was not written by redefer (its tokens are the clock in µs, below it
-- until the year 2255), and counting on from it would hand out tokens rounded (one twice) or,
-- past 2^63, wrapped to a negative number that the client reads as 2^63.
local MAX_TOKEN = 9007199254740992

-- Fails the script on a counter that holds `held`, past MAX_TOKEN: no token is counted from
-- it, and an operator deletes it (the next token is then the clock). A script that writes
-- what must not stay half-written before it counts (a claim's jobs taken out of the waiting
-- set) calls `check_counter` first; the others leave a holding that the caller, told of the
-- error, releases by its token.
local function refuse_counter(counter, held)
  error({err = 'FENCE the fencing counter ' .. counter .. ' holds ' .. held
    .. ', past 2^53, the largest token a script counts exactly: not a counter redefer wrote;'
    .. ' delete it (the next token is then the server clock in microseconds)'})
end

local function check_counter(counter)
  local held = redis.call('GET', counter)
  if held and (tonumber(held) or 0) >= MAX_TOKEN then
    refuse_counter(counter, held)
  end
end

-- Hands out `n` tokens from `counter`, the first at least the server's clock in µs; returns
-- the last (the first is `last - n + 1`).
-- The counter is written to the clock and read in one call (`SET ... GET`): a counter that
-- fell behind the clock, the common case (tokens are the clock unless a key takes more than
-- one a microsecond), costs one call. Raised to the clock, a counter needs no history: it may
-- expire, and its next use raises it again. One that stood ahead of the clock is counted on
-- from (a second call). One past MAX_TOKEN is put back as it was, and the script fails.
local function next_fences(counter, n)
  local now = now_us()
  local last = now + n - 1
  local held = redis.call('SET', counter, string.format('%d', last), 'PX', IDLE_MS, 'GET')
  local before = tonumber(held) or 0
  if before >= MAX_TOKEN then
    redis.call('SET', counter, held)
    refuse_counter(counter, held)
  end
  if before + 1 > now then
    last = before + n
    redis.call('SET', counter, string.format('%d', last), 'PX', IDLE_MS)
  end
  return last
end
