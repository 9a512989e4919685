-- Model: QueueModel (src/queue/model/mod.rs); tests/queue_model.rs checks the two agree.
-- The prelude of every queue script, prepended to it when the scripts are loaded
-- (src/store/redis/scripts.rs). It names the queue's keys, which every queue script receives
-- in this order (src/store/redis/keys.rs builds the list), and the steps several scripts share.
local DELAYED, INFLIGHT, JOBS, LEASES, DEAD, ERRORS, EXPIRIES, FENCE, HANDED, DONE, FINISHED, ACTIVITY, PAUSED, CLAIMS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14]
local READY, READY_DUE, GROUPS, GROUP_TAGS = KEYS[15], KEYS[16], KEYS[17], KEYS[18]
-- DELAYED  zset: job id -> due time (ms since the epoch, server clock), of the waiting jobs
--          not in READY
-- INFLIGHT zset: lease -> its deadline (ms). A lease is a claim's, `<token>:<first fence>`, holding
--          the jobs that claim took (its record in CLAIMS). Left by redefer 0.3 (read until
--          they end, see LEASES): a claim's, the same name padded to 65 bytes, or one job's
--          own, named by the job's id
-- JOBS     hash: job id -> envelope bytes
-- LEASES   hash (redefer 0.3): job id in flight -> its holder, the claim's lease or the
--          claimer's `<token>` alone. Nothing writes it now: it is read to recover the jobs a
--          0.3 scheduler left in flight, and goes with the last of them
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
-- CLAIMS   hash: a claim's lease -> the ids it claimed, in fence order (a MessagePack array:
--          the job of fence f is at position f - first fence + 1), and `<lease>@` -> one
--          byte per position, '1' while the lease holds that job, '0' once it was settled
--          (acked, retried, buried); both go with the lease's last job. 'held' -> how many
--          jobs those leases hold (gone at 0). Of a lease left by 0.3: `<lease>#` -> how
--          many jobs it still held, each job's holder in LEASES
-- Fair shares across groups (src/queue/group.rs): a job pushed in a group waits, once due, in
-- READY, where claims take jobs in start-time fair queuing order; while any job is grouped,
-- every due job goes through READY (an ungrouped one as the group '').
-- READY    zset: job id -> its start tag, of the due jobs of a queue that has groups: a
--          claim takes the lowest. A group's jobs get tags 1/weight apart, from the tag of
--          the first job ready (the virtual time) on: each group's turn comes in proportion to
--          its weight, however long any group's backlog. A job handed its key: '-inf' (first).
-- READY_DUE zset: job id -> due time (ms), of the jobs in READY: a waiting job is in DELAYED
--          or in READY and READY_DUE
-- GROUPS   hash: job id -> '<weight> <group>', of a grouped job, while the job is stored
-- GROUP_TAGS zset: a group as GROUPS stores it ('<weight> <group>', '' for the ungrouped) ->
--          the tag its next ready job gets at least; forgotten while no job is ready, and
--          below the virtual time (it is then the virtual time). It also tells operators each
--          group's backlog, (tag - virtual time) * weight, with no step of the claim's: a
--          claim touches no state per group (a write per group cost a drain over many groups
--          more than the rest of the groups' part of the claim)

-- One lease per claim, not per job: a claim writes one INFLIGHT entry and one record for its
-- whole batch, and an ack reads and rewrites that record's flags, once per claim it settles
-- jobs of. An INFLIGHT entry per job cost more than the rest of the claim and the ack
-- together (a small sorted set is a listpack: each insert scans it), and a holder per job in
-- LEASES (0.3) a hash write at the claim and a read and a delete at the ack, per job.

-- The scripts that end a job's wait (claim, cancel, bury_waiting, purge) also get, after
-- these, KEYS[19] PENDING and KEYS[20] PENDING_JOBS: the records of the jobs that coalesce
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
local MAX_GROUP_WEIGHT = 1000
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

-- A job's place in its claim's flags, from an argument: a whole number from 1, or nil.
local function position(arg)
  local at = tonumber(arg)
  if at and at >= 1 and at == math.floor(at) then
    return at
  end
  return nil
end

-- Whether the flags of a lease hold the job at position `at` (nil: no such position).
local function holds_at(flags, at)
  return flags ~= false and at ~= nil and string.byte(flags, at) == 49
end

-- Adds `n` to the count of jobs the leases hold. The count is for people (`stats`): a
-- `redis.pcall`, so that a value another client broke costs the count, never the claim or
-- the ack around it.
local function count_held(n)
  if n == 0 then
    return
  end
  local held = redis.pcall('HINCRBY', CLAIMS, 'held', n)
  if type(held) == 'number' and held <= 0 then
    redis.call('HDEL', CLAIMS, 'held')
  end
end

-- Settles the jobs at positions `at` (held, at most MAX_PAGE) of lease `lease`, whose flags are
-- `flags`: they leave it, and the lease goes with its last job. The caller counts them out of
-- 'held'.
local function settle(lease, flags, at)
  local bytes = {string.byte(flags, 1, #flags)}
  for _, p in ipairs(at) do
    bytes[p] = 48
  end
  flags = string.char(unpack(bytes))
  if string.find(flags, '1', 1, true) then
    redis.call('HSET', CLAIMS, lease .. '@', flags)
  else
    redis.call('ZREM', INFLIGHT, lease)
    redis.call('HDEL', CLAIMS, lease, lease .. '@')
  end
end

-- Settles the job a caller holds by its claim's lease `lease` and its position `at` there (as
-- given): whether the lease held it (then it no longer does).
local function settle_one(lease, at)
  local flags = redis.call('HGET', CLAIMS, lease .. '@')
  at = position(at)
  if not holds_at(flags, at) then
    return false
  end
  settle(lease, flags, {at})
  count_held(-1)
  return true
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

-- The jobs a lease redefer 0.3 wrote still holds (see LEASES): a claim's, those of its ids
-- whose holder it still is; any other entry is one job's own, named by its id, unless a
-- claim's lease holds that job now (then the entry is a leftover). A job whose holder another
-- client dropped counts only `with_orphan`.
local function held_by_0_3(lease, with_orphan)
  local ids = claimed_ids(lease)
  if not ids then
    local holder = redis.call('HGET', LEASES, lease)
    if (holder and string.find(holder, ':', 1, true)) or (not holder and not with_orphan) then
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

-- The jobs INFLIGHT entry `lease` still holds, and how many of them the 'held' count counts
-- (those of leases this version wrote). A job whose holder another client dropped counts only
-- `with_orphan`: a claim makes it due again (else it would stay in flight forever) and a purge
-- deletes it, while a listing shows the jobs held, as `stats` counts them.
local function held_jobs(lease, with_orphan)
  local flags = redis.call('HGET', CLAIMS, lease .. '@')
  if not flags then
    return held_by_0_3(lease, with_orphan), 0
  end
  local ids = claimed_ids(lease) or {}
  local held = {}
  for i = 1, math.min(#ids, #flags) do
    if string.byte(flags, i) == 49 then
      held[#held + 1] = ids[i]
    end
  end
  -- What the count counted: every flag still set, also of a list another client broke.
  local _, counted = string.gsub(flags, '1', '')
  return held, counted
end

-- Calls `command key ...` with `args` in chunks, within Lua's limit on unpacked values.
local function batched(command, key, args)
  for first = 1, #args, 1000 do
    redis.call(command, key, unpack(args, first, math.min(first + 999, #args)))
  end
end

-- Ends INFLIGHT entries `leases`, whose jobs `ids` were taken out of them, `counted` of those
-- counted in 'held': the leases and their records go, 0.3's holders too.
local function end_leases(leases, ids, counted)
  batched('ZREM', INFLIGHT, leases)
  for _, lease in ipairs(leases) do
    redis.call('HDEL', CLAIMS, lease, lease .. '@', lease .. '#')
  end
  if counted < #ids then
    batched('HDEL', LEASES, ids)
  end
  count_held(-counted)
end

-- Whether the queue has groups: grouped jobs stored, or jobs ready. Looked up once per script.
local has_groups = nil
local function grouped()
  if has_groups == nil then
    has_groups = redis.call('EXISTS', GROUPS, READY) > 0
  end
  return has_groups
end

-- The steps of fair shares and of a job's wait (defined below: `schedule` needs one of them).
local waits

-- Makes job `id` wait until `due`, and wakes sleeping schedulers when it is now the first due:
-- they sleep until the previous first, which this one comes before. A ready job moved (a
-- debounce) leaves READY: it becomes ready again when due.
local function schedule(id, due)
  if grouped() and redis.call('ZREM', READY, id) == 1 then
    redis.call('ZREM', READY_DUE, id)
    waits().forget_past_turns()
  end
  redis.call('ZADD', DELAYED, due, id)
  if redis.call('ZRANGE', DELAYED, 0, 0)[1] == id then
    redis.call('PUBLISH', WAKE, due)
  end
end

-- The steps of fair shares across groups, and those that read or end a job's wait (ready or
-- not), made on a script's first use of them: a script makes each function it defines again
-- on every call, and four of these made by every push cost it about half a microsecond of
-- server time (a push of one job takes about 14) for nothing while the queue has no groups.
local wait_steps = nil
function waits()
  if wait_steps then
    return wait_steps
  end
  local steps = {}

  -- Forgets the groups' turns no ready job needs: all of them while no job is ready (tags start
  -- again from 0), else those below the virtual time (the lowest tag ready: a group below it
  -- starts at it). Called where ready jobs leave READY (made ready, claimed, purged, cancelled,
  -- moved), so that a queue with nothing ready keeps no turns. Returns the virtual time (nil:
  -- nothing ready).
  function steps.forget_past_turns()
    local lowest = redis.call('ZRANGEBYSCORE', READY, '(-inf', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    local virtual = tonumber(lowest[2])
    if not virtual then
      redis.call('UNLINK', GROUP_TAGS)
    else
      redis.call('ZREMRANGEBYSCORE', GROUP_TAGS, '-inf', '(' .. virtual)
    end
    return virtual
  end

  -- The group and weight of a GROUPS value ('<weight> <group>'); nil for an ungrouped job.
  -- A value another client wrote is a group of weight 1.
  function steps.group_of(value)
    if not value then
      return nil, 1
    end
    local weight, group = string.match(value, '^(%d+) (.*)$')
    if not weight then
      return value, 1
    end
    return group, math.max(1, math.min(tonumber(weight), MAX_GROUP_WEIGHT))
  end

  -- Makes jobs `ids`, due at `dues`, with GROUPS values `values`, ready (at most MAX_PAGE): each
  -- gets its group's next start tag, at least the virtual time (the lowest tag ready), and
  -- moves its group's next tag 1/weight on. Wakes sleeping schedulers when none was ready.
  function steps.make_ready(ids, dues, values, now)
    local virtual = steps.forget_past_turns()
    local none_ready = virtual == nil
    virtual = virtual or 0
    -- A group's turns are those of its GROUPS value: its name and weight (a pattern match per
    -- group, not per job).
    local tags, names, weights = {}, {}, {}
    local groups = {}
    for i = 1, #ids do
      local group = values[i] or ''
      groups[i] = group
      if tags[group] == nil then
        names[#names + 1] = group
        tags[group] = false
        local _, weight = steps.group_of(values[i])
        weights[group] = weight
      end
    end
    local found = redis.call('ZMSCORE', GROUP_TAGS, unpack(names))
    for i, group in ipairs(names) do
      tags[group] = tonumber(found[i]) or virtual
    end
    local ready, ready_due = {}, {}
    for i, id in ipairs(ids) do
      local group = groups[i]
      local tag = math.max(tags[group], virtual)
      tags[group] = tag + 1 / weights[group]
      ready[2 * i - 1], ready[2 * i] = tag, id
      ready_due[2 * i - 1], ready_due[2 * i] = dues[i], id
    end
    local next_tags = {}
    for _, group in ipairs(names) do
      next_tags[#next_tags + 1] = tags[group]
      next_tags[#next_tags + 1] = group
    end
    batched('ZADD', READY, ready)
    batched('ZADD', READY_DUE, ready_due)
    batched('ZADD', GROUP_TAGS, next_tags)
    -- With a job ready before, schedulers are claiming, not asleep.
    if none_ready then
      redis.call('PUBLISH', WAKE, now)
    end
  end

  -- Puts new jobs `ids` (at most MAX_PAGE), due at `due`, in group `group` (as GROUPS stores
  -- it), ready at once when due, so that their group's turn comes
  -- whatever waits in DELAYED. Whether they are ready; else the caller schedules them.
  function steps.join_group(ids, group, due, now)
    local groups, dues, values = {}, {}, {}
    for i, id in ipairs(ids) do
      groups[2 * i - 1], groups[2 * i] = id, group
      dues[i], values[i] = due, group
    end
    batched('HSET', GROUPS, groups)
    has_groups = true
    if due > now then
      return false
    end
    steps.make_ready(ids, dues, values, now)
    return true
  end

  -- Makes waiting or claimed job `id` due at once, ahead of every group's turn: the lock it
  -- waits for was handed to it, and a handed key is held for it.
  function steps.hand_now(id, now)
    if not grouped() then
      schedule(id, now)
      return
    end
    local due = redis.call('ZSCORE', DELAYED, id)
    if due then
      redis.call('ZREM', DELAYED, id)
      redis.call('ZADD', READY_DUE, math.min(tonumber(due), now), id)
    else
      -- Ready already (its due time stays), or back from its run (due now).
      redis.call('ZADD', READY_DUE, 'NX', now, id)
    end
    redis.call('ZADD', READY, '-inf', id)
    redis.call('PUBLISH', WAKE, now)
  end


  -- When waiting job `id` is due, whether in DELAYED or ready; nil when it does not wait.
  function steps.waiting_due(id)
    local due = redis.call('ZSCORE', DELAYED, id)
    if not due and grouped() then
      due = redis.call('ZSCORE', READY_DUE, id)
    end
    return due and tonumber(due)
  end

  -- Takes job `id` out of the waiting jobs (DELAYED or READY); whether it was waiting.
  function steps.unwait(id)
    if redis.call('ZREM', DELAYED, id) == 1 then
      return true
    end
    if grouped() and redis.call('ZREM', READY, id) == 1 then
      redis.call('ZREM', READY_DUE, id)
      steps.forget_past_turns()
      return true
    end
    return false
  end
  wait_steps = steps
  return steps
end

-- Whether job `id` is in flight: stored, and neither waiting nor dead (a job is in exactly
-- one of them).
local function in_flight(id)
  if redis.call('HEXISTS', LEASES, id) == 1 then
    return true
  end
  return redis.call('HEXISTS', JOBS, id) == 1 and not waits().waiting_due(id)
    and not redis.call('ZSCORE', DEAD, id)
end

-- Moves job `id`, already out of the waiting and in-flight sets, to the dead-letter set at
-- `now` with `reason`, forgetting its lease expiries and handoff mark (its bytes stay).
local function bury_now(id, reason, now)
  redis.call('ZADD', DEAD, now, id)
  redis.call('HSET', ERRORS, id, reason)
  redis.call('HDEL', EXPIRIES, id)
  redis.call('HDEL', HANDED, id)
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
-- PENDING (KEYS[19]) and PENDING_JOBS (KEYS[20]) of the scripts that get them: a record stands
-- for a waiting job only. One look when no job waits as a key's pending job.
local function forget_pending(ids)
  local pending, pending_jobs = KEYS[19], KEYS[20]
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
