-- The prelude of every queue script, prepended to it when the scripts are loaded
-- (src/store/redis/scripts.rs). It names the queue's keys, which every queue script receives
-- in this order (src/store/redis/keys.rs builds the list), and the steps several scripts share.
local DELAYED, INFLIGHT, JOBS, LEASES, DEAD, ERRORS, EXPIRIES, FENCE, HANDED =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
-- DELAYED  zset: job id -> due time (ms since the epoch, server clock)
-- INFLIGHT zset: job id -> lease deadline (ms)
-- JOBS     hash: job id -> envelope bytes
-- LEASES   hash: job id -> the lease token of the claimer that holds it
-- DEAD     zset: job id -> time buried (ms)
-- ERRORS   hash: job id -> why it was buried
-- EXPIRIES hash: job id -> how many of its leases ran out
-- FENCE    counter: the last job fencing token handed out by a claim
-- HANDED   hash: job id -> 1 when the lock it waits for was handed to it while it was in
--          flight (its run met the lock and is on its way back): it goes back due at once

-- The pub/sub channel that wakes sleeping schedulers; every queue script gets it in ARGV[1],
-- and its own arguments from ARGV[2].
local WAKE = ARGV[1]

-- The sorted sets a caller may name.
local SETS = {delayed = DELAYED, inflight = INFLIGHT, dead = DEAD}

-- The limits the Rust side applies too (src/queue/rules.rs; a unit test compares them).
local MAX_PAGE = 1000
local MAX_JOB_ID_LEN = 128
local MAX_LEASE_MS = 86400000

-- A lease length asked for, in ms, within 1 .. MAX_LEASE_MS: no lease ends later than that,
-- which is what lets a claim treat a later deadline as written by someone else.
local function lease_ms(asked)
  return math.max(1, math.min(tonumber(asked), MAX_LEASE_MS))
end

-- The server's clock in whole milliseconds since the epoch, rounded down.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Whether `token` holds the lease on job `id`.
local function holds_lease(id, token)
  return redis.call('HGET', LEASES, id) == token
end

-- Ends the lease on job `id`: it leaves the in-flight set.
local function end_lease(id)
  redis.call('ZREM', INFLIGHT, id)
  redis.call('HDEL', LEASES, id)
end

-- Makes job `id` wait until `due`, and wakes sleeping schedulers when it is now the first due:
-- they sleep until the previous first, which this one comes before.
local function schedule(id, due)
  redis.call('ZADD', DELAYED, due, id)
  if redis.call('ZRANGE', DELAYED, 0, 0)[1] == id then
    redis.call('PUBLISH', WAKE, due)
  end
end

-- Calls `command key ...` with `args` in chunks, within Lua's limit on unpacked values.
local function batched(command, key, args)
  for first = 1, #args, 1000 do
    redis.call(command, key, unpack(args, first, math.min(first + 999, #args)))
  end
end

-- The script itself follows.
