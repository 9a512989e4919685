-- The prelude of every queue script, prepended to it when the scripts are loaded
-- (src/store/redis/scripts.rs). It names the queue's keys, which every queue script receives
-- in this order (src/store/redis/keys.rs builds the list), and the steps several scripts share.
local DELAYED, INFLIGHT, JOBS, LEASES, DEAD, ERRORS, EXPIRIES, FENCE, HANDED, DONE, FINISHED, ACTIVITY, PAUSED, CLAIMS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14]
-- DELAYED  zset: job id -> due time (ms since the epoch, server clock)
-- INFLIGHT zset: lease -> its deadline (ms). A lease is a claim's, `<token>:<first fence>` (padded),
--          holding the jobs that claim took (listed in CLAIMS), or one job's own, named by the
--          job's id, once that job's lease was extended (or stored so by redefer 0.2)
-- JOBS     hash: job id -> envelope bytes
-- LEASES   hash: job id in flight -> its holder: the claim's lease (`<token>:<first fence>`)
--          while the claim's lease holds it, the claimer's `<token>` alone once it has its own
-- DEAD     zset: job id -> time buried (ms)
-- ERRORS   hash: job id -> why it was buried
-- EXPIRIES hash: job id -> how many of its leases ran out
-- FENCE    counter: the last job fencing token handed out by a claim
-- HANDED   hash: job id -> 1 when the lock it waits for was handed to it while it was in
--          flight (its run met the lock and is on its way back): it goes back due at once
-- DONE     zset: job id -> time finished (ms), the finished jobs kept when retention is on
-- FINISHED hash: job id -> envelope bytes of a job in DONE
-- ACTIVITY hash: '<minute>:<counter>' -> count, per minute of the server's clock (ms / 60000)
--          for the last ACTIVITY_MINUTES minutes, and 'minute' -> the minute last written
-- PAUSED   string: present while the queue is paused (claims hand out nothing)
-- CLAIMS   hash: a claim's lease -> the ids it claimed (a MessagePack array), and
--          `<lease>#` -> how many of them it still holds; both go with the lease
-- One lease per claim, not per job: a claim writes one INFLIGHT entry for its whole batch, and
-- an ack removes it with its last job. An INFLIGHT entry per job cost more than the rest of
-- the claim and the ack together (a small sorted set is a listpack: each insert scans it).

-- The scripts that end a job's wait (claim, cancel, bury_waiting, purge) also get, after
-- these, KEYS[15] PENDING and KEYS[16] PENDING_JOBS: the records of the jobs that coalesce
-- keeps waiting per lock key (queue_pending.lua), which forget_pending below drops.

-- The pub/sub channel that wakes sleeping schedulers; every queue script gets it in ARGV[1],
-- and its own arguments from ARGV[2].
local WAKE = ARGV[1]

-- The sorted sets a caller may name.
local SETS = {delayed = DELAYED, inflight = INFLIGHT, dead = DEAD, done = DONE}

-- The limits the Rust side applies too (src/queue/rules.rs; a unit test compares them).
local MAX_PAGE = 1000
local MAX_JOB_ID_LEN = 128
local MAX_LEASE_MS = 86400000
local ACTIVITY_MINUTES = 60

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

-- Whether `holder`, a LEASES value, is claimer `token`'s: the token itself (a lease of the
-- job's own) or `<token>:<first fence>` (its claim's lease).
local function held_by(holder, token)
  return holder == token or (string.sub(holder, 1, #token) == token and string.byte(holder, #token + 1) == 58)
end

-- Whether `token` holds the lease on job `id`.
local function holds_lease(id, token)
  local holder = redis.call('HGET', LEASES, id)
  return holder ~= false and held_by(holder, token)
end

-- Whether a LEASES value is a claim's lease (`<token>:<first fence>`), not a job's own.
local function is_claim(holder)
  return string.find(holder, ':', 1, true) ~= nil
end

-- The INFLIGHT entry of the lease holding job `id` for `holder` (its LEASES value).
local function lease_entry(id, holder)
  if is_claim(holder) then
    return holder
  end
  return id
end

-- Counts `n` jobs out of claim lease `claim`; the lease goes with its last job.
local function leave_claim(claim, n)
  if redis.call('HINCRBY', CLAIMS, claim .. '#', -n) <= 0 then
    redis.call('ZREM', INFLIGHT, claim)
    redis.call('HDEL', CLAIMS, claim, claim .. '#')
  end
end

-- Ends the lease on job `id`: it leaves the in-flight jobs.
local function end_lease(id)
  local holder = redis.call('HGET', LEASES, id)
  if not holder then
    return
  end
  redis.call('HDEL', LEASES, id)
  if is_claim(holder) then
    leave_claim(holder, 1)
  else
    redis.call('ZREM', INFLIGHT, id)
  end
end

-- Whether job `id` is in flight.
local function in_flight(id)
  return redis.call('HEXISTS', LEASES, id) == 1
end

-- The ids claim lease `claim` was written with, or nil when CLAIMS has no list for it that
-- redefer wrote (an entry of one job's own, or bytes another client wrote).
local function claimed_ids(claim)
  local packed = redis.call('HGET', CLAIMS, claim)
  if not packed then
    return nil
  end
  local ok, ids = pcall(cmsgpack.unpack, packed)
  if not ok or type(ids) ~= 'table' then
    return nil
  end
  for i = 1, #ids do
    if type(ids[i]) ~= 'string' then
      return nil
    end
  end
  return ids
end

-- The jobs INFLIGHT entry `lease` still holds. A claim's: those of its ids whose holder it
-- still is. Any other entry is one job's own, named by its id (an extended lease, or one
-- stored by redefer 0.2): that job, unless a claim's lease holds it now (then the entry is
-- a leftover). A job whose holder another client dropped counts only `with_orphan`: a claim
-- makes it due again (else it would stay in flight forever) and a purge deletes it, while a
-- listing shows the jobs held, as `stats` counts them.
local function held_jobs(lease, with_orphan)
  local ids = claimed_ids(lease)
  if not ids then
    local holder = redis.call('HGET', LEASES, lease)
    if (holder and is_claim(holder)) or (not holder and not with_orphan) then
      return {}
    end
    return {lease}
  end
  local holders = redis.call('HMGET', LEASES, unpack(ids))
  local held = {}
  for i, id in ipairs(ids) do
    if holders[i] == lease then
      held[#held + 1] = id
    end
  end
  return held
end

-- Makes job `id` wait until `due`, and wakes sleeping schedulers when it is now the first due:
-- they sleep until the previous first, which this one comes before.
local function schedule(id, due)
  redis.call('ZADD', DELAYED, due, id)
  if redis.call('ZRANGE', DELAYED, 0, 0)[1] == id then
    redis.call('PUBLISH', WAKE, due)
  end
end

-- Moves job `id`, already out of the waiting and in-flight sets, to the dead-letter set at
-- `now` with `reason`, forgetting its lease expiries and handoff mark (its bytes stay).
local function bury_now(id, reason, now)
  redis.call('ZADD', DEAD, now, id)
  redis.call('HSET', ERRORS, id, reason)
  redis.call('HDEL', EXPIRIES, id)
  redis.call('HDEL', HANDED, id)
end

-- Calls `command key ...` with `args` in chunks, within Lua's limit on unpacked values.
local function batched(command, key, args)
  for first = 1, #args, 1000 do
    redis.call(command, key, unpack(args, first, math.min(first + 999, #args)))
  end
end

-- Adds `counts` ({counter, n, counter, n, ...}) to the current minute's activity, when
-- `counting` is '1' (the scripts that count take it as an argument: a queue handle may turn
-- its counters off, and then pays nothing for them). When the
-- minute changed, drops the fields of minutes out of the window: the hash stays within
-- ACTIVITY_MINUTES minutes of counters, read back by operators' dashboards. The counters are
-- for people: every call is a `redis.pcall`, so that a hash another client broke (a wrong
-- type, a field that is not a number) costs its counts, never the job operation around it.
local function record(counting, now, counts)
  if counting ~= '1' then
    return
  end
  local minute = math.floor(now / 60000)
  -- A counter's first count in a minute creates its field: only then may the minute have
  -- changed, and only then is it looked up (a look per call cost every claim and ack a call).
  local first_count = false
  for i = 1, #counts, 2 do
    if counts[i + 1] > 0 then
      local count = redis.pcall('HINCRBY', ACTIVITY, minute .. ':' .. counts[i], counts[i + 1])
      if count == counts[i + 1] then
        first_count = true
      end
    end
  end
  if not first_count then
    return
  end
  local last = tonumber(redis.pcall('HGET', ACTIVITY, 'minute'))
  if last ~= minute then
    -- Ours holds at most ACTIVITY_MINUTES + 1 minutes of 7 counters; a larger hash was
    -- written by someone else, and is dropped rather than scanned (bounded work).
    if (tonumber(redis.pcall('HLEN', ACTIVITY)) or 0) > ACTIVITY_MINUTES * 16 then
      redis.pcall('DEL', ACTIVITY)
    elseif last then
      local stale = {}
      local fields = redis.pcall('HKEYS', ACTIVITY)
      for _, field in ipairs(fields) do
        local at = tonumber(string.match(field, '^(%d+):'))
        if at and at <= minute - ACTIVITY_MINUTES then
          stale[#stale + 1] = field
        end
      end
      for first = 1, #stale, 1000 do
        redis.pcall('HDEL', ACTIVITY, unpack(stale, first, math.min(first + 999, #stale)))
      end
    end
    redis.pcall('HSET', ACTIVITY, 'minute', minute)
  end
end

-- Forgets the coalesce records of `ids`, jobs that stopped waiting (at most MAX_PAGE), in
-- PENDING (KEYS[15]) and PENDING_JOBS (KEYS[16]) of the scripts that get them: a record stands
-- for a waiting job only. One look when no job waits as a key's pending job.
local function forget_pending(ids)
  local pending, pending_jobs = KEYS[15], KEYS[16]
  if #ids == 0 or redis.call('EXISTS', pending_jobs) == 0 then
    return
  end
  local fields = {}
  for _, field in ipairs(redis.call('HMGET', pending_jobs, unpack(ids))) do
    if field then
      fields[#fields + 1] = field
    end
  end
  if #fields > 0 then
    redis.call('HDEL', pending, unpack(fields))
    redis.call('HDEL', pending_jobs, unpack(ids))
  end
end

-- The script itself follows.
