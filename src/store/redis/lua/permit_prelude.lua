-- Model: PermitModel (src/semaphore/model.rs): KeyPermits::prune, fits, hand_to_line; tests/permit_model.rs checks the two agree.
-- The prelude of every permit script (a semaphore: up to a limit of holders per key; a
-- read-write lock: its readers share the limit, a writer holds the key alone), prepended to
-- it after its flags line when the scripts are loaded (src/store/redis/scripts.rs).
-- It names the semaphore's keys, which every permit script receives in this order
-- (src/store/redis/keys.rs builds the list), and the steps several scripts share.
local PERMITS, FENCES, FENCE, LIMIT, WAITERS, HOLDS, WRITERS, FIRST =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
-- PERMITS  zset: holder -> lease deadline, '@' .. waiter -> reservation deadline (ms, server
--          clock); both count against the limit. A holder is its token, a writer's is
--          WRITER_MARK .. its token: a writer holds the key alone
-- FENCES   hash: holder (as in PERMITS) -> the fencing token of its permit
-- FENCE    counter: the last fencing token handed out
-- LIMIT    string: the limit the last acquire asked for, for operators' tools (PX its TTL)
-- WAITERS  zset: waiter -> arrival order; the line, first come first served
-- HOLDS    string: the key's last hold in ms (expires IDLE_MS after the last release)
-- WRITERS  set: the waiters in line that write (expires with WAITERS, IDLE_MS after the last join)
-- FIRST    string: '<holder>|<limit>', the permit taken on a free key by plain commands
--          (src/semaphore/redis_store.rs), PX its lease: a permit nobody else holds costs one
--          key, as the mutex's does. It counts as a holder beside PERMITS' (never in it); its
--          fence is not kept (a re-sent acquire that finds it is handed a new one). Taken
--          only while nobody is in line; '<holder>|<limit>' .. LINE_MARK once someone joins
--          the line (mark_first), so that a release by value (Valkey's DELIFEQ) finds it
--          only while nobody waits for it, as the mutex's lock

-- What starts a writer's holder name (tokens are hex).
local WRITER_MARK = '!'

-- What ends the first permit's value once someone joined the line (lock_prelude.lua's too).
local LINE_MARK = '|w'

-- The pub/sub channel that tells the line who a permit was reserved for, and how long a
-- reservation lasts: every permit script gets them in ARGV[1] and ARGV[2], its own arguments
-- from ARGV[3].
local WAKE, RESERVATION_MS = ARGV[1], tonumber(ARGV[2])

-- The most expired permits one call drops, and the most permits it reserves: bounded work
-- per call (the rest goes at the next).
local MAX_STEPS = 64

-- The server's clock in ms: deadlines never depend on a client's clock.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Drops the permits and reservations whose deadline passed: a dead holder's permit is free
-- from its deadline on, never before; a reservation that ran out unused takes its waiter out
-- of the line. Returns the waiters dropped.
local function prune(now)
  local expired = redis.call('ZRANGE', PERMITS, '-inf', now, 'BYSCORE', 'LIMIT', 0, MAX_STEPS)
  local dropped = {}
  for _, member in ipairs(expired) do
    redis.call('ZREM', PERMITS, member)
    if string.sub(member, 1, 1) == '@' then
      local waiter = string.sub(member, 2)
      redis.call('ZREM', WAITERS, waiter)
      redis.call('SREM', WRITERS, waiter)
      dropped[#dropped + 1] = waiter
    else
      redis.call('HDEL', FENCES, member)
    end
  end
  return dropped
end

-- The semaphore's keys live as long as their last deadline, `ms` from now at least: a key
-- nobody touches again is gone after its last holder's TTL. The limit lives as long as the
-- permits, so that a key whose permits are renewed past their first TTL is listed with it.
local function keep_alive(ms)
  for _, key in ipairs({PERMITS, FENCES, LIMIT}) do
    if redis.call('PTTL', key) < ms then
      redis.call('PEXPIRE', key, ms)
    end
  end
end

-- Whether `waiter` waits to write.
local function waits_to_write(waiter)
  return redis.call('SISMEMBER', WRITERS, waiter) == 1
end

-- The holder of the key's first permit (FIRST), false when there is none.
local function first_holder()
  local first = redis.call('GET', FIRST)
  return first and string.match(first, '^[^|]*')
end

-- Marks the first permit, if any, as one the line waits for (LINE_MARK): its holder's release
-- by value fails then, and the release script hands the line what is free.
local function mark_first()
  local first = redis.call('GET', FIRST)
  if first and string.sub(first, -#LINE_MARK) ~= LINE_MARK then
    redis.call('SET', FIRST, first .. LINE_MARK, 'KEEPTTL')
  end
end

-- How many permits are held or reserved: PERMITS' entries and the first permit.
local function taken_now()
  return redis.call('ZCARD', PERMITS) + redis.call('EXISTS', FIRST)
end

-- Whether a holder (a writer when `writer`) fits beside the permits held and reserved now: a
-- writer only on a free key, a reader below the limit and beside no writer (a writer, held
-- or reserved, is alone: it is the one entry, or the first permit).
local function fits(writer, limit)
  local first = first_holder()
  local entries = redis.call('ZCARD', PERMITS)
  local taken = entries + (first and 1 or 0)
  if writer or taken == 0 then
    return taken == 0
  end
  if taken >= limit or (first and string.sub(first, 1, 1) == WRITER_MARK) then
    return false
  end
  -- No entry, or several (a writer's would be alone): readers only.
  if entries ~= 1 then
    return true
  end
  local only = redis.call('ZRANGE', PERMITS, 0, 0)[1]
  if string.sub(only, 1, 1) == WRITER_MARK then
    return false
  end
  return not (string.sub(only, 1, 1) == '@' and waits_to_write(string.sub(only, 2)))
end

-- Reserves the key's free permits for the line in its order, each for RESERVATION_MS, and
-- tells the line who: the first waiters without a reservation, up to the first that does not
-- fit (a writer waits for every holder to leave, and the readers behind it wait for it:
-- writers are not starved). Returns the waiters reserved for.
local function hand_to_line(now, limit)
  local handed = {}
  if taken_now() >= limit then
    return handed
  end
  -- Reserved waiters stand at the front of the line (reservations go in its order); the
  -- walk is bounded, the rest goes at a later call.
  for _, waiter in ipairs(redis.call('ZRANGE', WAITERS, 0, MAX_STEPS - 1)) do
    local member = '@' .. waiter
    if not redis.call('ZSCORE', PERMITS, member) then
      if not fits(waits_to_write(waiter), limit) then
        break
      end
      redis.call('ZADD', PERMITS, now + RESERVATION_MS, member)
      redis.call('PUBLISH', WAKE, waiter)
      handed[#handed + 1] = waiter
    end
  end
  if #handed > 0 then
    keep_alive(RESERVATION_MS)
  end
  return handed
end
