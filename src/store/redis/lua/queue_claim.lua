#!lua flags=allow-oom
-- Model: QueueModel::claim (src/queue/model/mod.rs); tests/queue_model.rs checks the two agree.
-- Claims up to ARGV[2] due jobs for one claimer, atomically, by the server's clock.
-- ARGV[2] most jobs to claim, ARGV[3] lease ms (at most MAX_LEASE_MS), ARGV[4] the claimer's lease token,
-- ARGV[5] largest envelope in bytes, ARGV[6] lease expiries after which a job is buried (0: never),
-- ARGV[7] '1' to count the activity.
-- First makes jobs whose lease ran out (their claimer died) due again, then claims due jobs
-- in due order: the batch is held by one lease of this claimer's (one INFLIGHT entry, one
-- record in CLAIMS), so no other claimer can receive its jobs until the lease runs out.
-- Every range has a LIMIT: work per call is bounded.
-- A due entry that cannot be a job of ours (bytes missing or over the limit, written by another
-- client) goes to the dead-letter set with the reason instead; one whose id we never write is
-- claimed, and buried by the claimer (src/store/redis/queue.rs).
-- Writes go out as one call per batch, not per job: each redis.call has a fixed cost.
-- Each claimed job gets a job fencing token from FENCE, higher than any handed out before on
-- this queue: a downstream store can refuse the writes of an older run of the same job.
-- Returns {ms until the next job is due or lease runs out (-1: none, 0: more are due now),
--          the first job's fencing token (0: no job), the jobs packed in one string}: the
--          jobs' fencing tokens follow the first's, one apart, in order; the claim's lease is
--          `<token>:<first job's fencing token>`, and a job's position in it its fencing token
--          less the first's, plus 1. The jobs are packed by cmsgpack: an array of their due
--          time in ms, id and envelope, three entries per job; '' for none
--          (src/store/redis/claim_reply.rs reads them).
local now = now_ms()
-- A paused queue hands out nothing, not even the jobs whose lease ran out: resuming wakes the
-- schedulers (queue_pause.lua).
if redis.call('EXISTS', PAUSED) == 1 then
  return {-1, 0, ''}
end
local max = math.max(0, math.min(tonumber(ARGV[2]), MAX_PAGE))
local max_bytes = tonumber(ARGV[5])
local max_expiries = tonumber(ARGV[6])

-- Jobs to bury, written in one go at the end: {now, id, ...} for DEAD, {id, reason, ...} for ERRORS.
local dead, errors = {}, {}
local function bury(id, reason)
  dead[#dead + 1] = now
  dead[#dead + 1] = id
  errors[#errors + 1] = id
  errors[#errors + 1] = reason
end

-- The lease that runs out first: whether any ran out, and when the next will (read again at
-- the end only when leases ran out).
local next_deadline = tonumber(redis.call('ZRANGE', INFLIGHT, 0, 0, 'WITHSCORES')[2])
-- Strictly past the deadline: `now` is rounded down to the ms, so a deadline equal to it may
-- still be up to 1 ms ahead, and a lease must never end early.
local expired = {}
if next_deadline ~= nil and next_deadline < now then
  expired = redis.call('ZRANGEBYSCORE', INFLIGHT, '-inf', '(' .. now, 'WITHSCORES', 'LIMIT', 0, max)
end
-- No lease of ours ends later than MAX_LEASE_MS from now: an entry past that (a deadline of
-- +inf, written by another client) would otherwise stay in flight forever. It is due now.
local beyond = redis.call('ZRANGEBYSCORE', INFLIGHT, '(' .. (now + MAX_LEASE_MS), '+inf', 'LIMIT', 0, max)
for _, lease in ipairs(beyond) do
  expired[#expired + 1] = lease
  expired[#expired + 1] = now
end
if #expired > 0 then
  -- The jobs each lease still holds go back, due at its deadline. Leases are taken whole, until
  -- `max` jobs went back: at most `max` leases of at most MAX_PAGE jobs each.
  local back, ids, ended, returning, counted = {}, {}, {}, 0, 0
  for i = 1, #expired, 2 do
    if returning >= max then
      break
    end
    local lease, deadline = expired[i], expired[i + 1]
    ended[#ended + 1] = lease
    local held, of_ours = held_jobs(lease, true)
    counted = counted + of_ours
    for _, id in ipairs(held) do
      returning = returning + 1
      ids[returning] = id
      -- A job whose lease keeps running out crashes or hangs its handler each time: without a
      -- count it would come back forever and never reach the dead-letter set.
      -- A count another client broke (not a number) counts as this first expiry, as a broken
      -- count of held jobs stops no claim: its error would fail every claim of the queue.
      local expiries = redis.pcall('HINCRBY', EXPIRIES, id, 1)
      if type(expiries) ~= 'number' then
        expiries = 1
        redis.call('HSET', EXPIRIES, id, expiries)
      end
      if max_expiries > 0 and expiries >= max_expiries then
        bury(id, 'its lease ran out ' .. expiries .. ' times: the handler crashed or hung')
      else
        back[#back + 1] = deadline
        back[#back + 1] = id
      end
    end
  end
  end_leases(ended, ids, counted)
  batched('ZADD', DELAYED, back)
  next_deadline = tonumber(redis.call('ZRANGE', INFLIGHT, 0, 0, 'WITHSCORES')[2])
end

-- The claimed jobs' parts, flat (a table per job cost the script an allocation each), packed
-- into one string at the end: a reply of several values per job cost the client more to read
-- than the jobs' own decoding.
local claimed, taken, first_fence = {}, 0, 0
local function packed(parts)
  if #parts == 0 then
    return ''
  end
  return cmsgpack.pack(parts)
end
-- The jobs to take, in order, with their due times; and whether more are due.
local ids, dues, more_due = {}, {}, false
if grouped() then
  -- Due jobs become ready first (the ones whose lease ran out above among them), a page per
  -- claim: a claim takes what the groups' turns say, from READY.
  local became = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', now, 'WITHSCORES', 'LIMIT', 0, MAX_PAGE)
  if #became > 0 then
    local promoted, at = {}, {}
    for i = 1, #became / 2 do
      promoted[i], at[i] = became[2 * i - 1], became[2 * i]
    end
    redis.call('ZREMRANGEBYRANK', DELAYED, 0, #promoted - 1)
    waits().make_ready(promoted, at, redis.call('HMGET', GROUPS, unpack(promoted)), now)
    more_due = #promoted == MAX_PAGE
  end
  local ready = redis.call('ZRANGE', READY, 0, max)
  more_due = more_due or #ready > max
  for i = 1, math.min(#ready, max) do
    ids[i] = ready[i]
  end
  if #ids > 0 then
    -- A counter no token can be counted from fails the claim before a job leaves the ready
    -- set (or the waiting set, below): the jobs wait, none taken out and left unheld.
    check_counter(FENCE)
    redis.call('ZREMRANGEBYRANK', READY, 0, #ids - 1)
    dues = redis.call('ZMSCORE', READY_DUE, unpack(ids))
    redis.call('ZREM', READY_DUE, unpack(ids))
    if #ready <= max then
      -- The claim took every ready job: the groups' turns start again at the next.
      redis.call('UNLINK', GROUP_TAGS)
    end
  end
else
  -- One more than it takes: when that one is due too, the claimer is told to come back at once
  -- without a look at the next due time (a call less per claim in a drain).
  local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', now, 'WITHSCORES', 'LIMIT', 0, max + 1)
  more_due = #due / 2 > max
  for i = 1, math.min(#due / 2, max) do
    ids[i], dues[i] = due[2 * i - 1], due[2 * i]
  end
  if #ids > 0 then
    check_counter(FENCE)
    -- They are the first by score: removed by rank, without looking each one up.
    redis.call('ZREMRANGEBYRANK', DELAYED, 0, #ids - 1)
  end
end
local count = #ids
if count > 0 then
  -- Claimed (or buried below), a key's pending job is no longer waiting: a request now is a
  -- new job.
  forget_pending(ids)
  -- At most MAX_PAGE ids (max is capped to it): one HMGET reads every envelope.
  local envelopes = redis.call('HMGET', JOBS, unpack(ids))
  local held = {}
  local lag, lag_max = 0, 0
  for i = 1, count do
    local id, envelope = ids[i], envelopes[i]
    local reason = nil
    -- The id's own rule is checked by the claimer, which buries an id it refuses: a pattern
    -- match per job here cost about a sixth of the claim's server time.
    if not envelope or #envelope == 0 then
      reason = 'the job has no envelope (deleted or never written by redefer)'
    elseif #envelope > max_bytes then
      reason = 'the envelope is ' .. #envelope .. ' bytes, over the limit of ' .. max_bytes
    end
    if reason then
      bury(id, reason)
    else
      taken = taken + 1
      held[taken] = id
      -- A due job's time is at most now; one written before the epoch (by another client) is
      -- read as the epoch, so that it packs as an integer.
      local at = math.max(0, math.floor(tonumber(dues[i]) or now))
      claimed[3 * taken - 2] = at
      claimed[3 * taken - 1] = id
      claimed[3 * taken] = envelope
      local late = now - at
      if late > 0 then
        lag = lag + late
        if late > lag_max then lag_max = late end
      end
    end
  end
  if taken > 0 then
    local first = next_fences(FENCE, taken) - taken
    first_fence = first + 1
    local deadline = now + lease_ms(ARGV[3])
    if next_deadline == nil or deadline < next_deadline then
      next_deadline = deadline
    end
    -- One lease for the batch, named by the claimer's token and the batch's first fence (no
    -- other claim on this queue has that fence): one entry in INFLIGHT, its record in CLAIMS.
    -- (`%d`: `..` would write a fence of over 14 digits in floating-point notation, rounded.)
    local lease = string.format('%s:%d', ARGV[4], first + 1)
    redis.call('ZADD', INFLIGHT, deadline, lease)
    redis.call('HSET', CLAIMS, lease, cmsgpack.pack(held), lease .. '@', string.rep('1', taken))
    count_held(taken)
    record(ARGV[7], now, {'claimed', taken, 'lag_ms', lag})
    local field = math.floor(now / 60000) .. ':lag_max_ms'
    if lag_max > (tonumber(redis.pcall('HGET', ACTIVITY, field)) or 0) then
      redis.pcall('HSET', ACTIVITY, field, lag_max)
    end
  end
end
batched('ZADD', DEAD, dead)
batched('HSET', ERRORS, errors)
if #dead > 0 then
  record(ARGV[7], now, {'dead', #dead / 2})
end

if more_due then
  return {0, first_fence, packed(claimed)}
end
local wait = -1
local next_at = nil
local first_due = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
if first_due[2] then next_at = tonumber(first_due[2]) end
if next_deadline ~= nil and (next_at == nil or next_deadline + 1 < next_at) then
  next_at = next_deadline + 1
end
if next_at ~= nil then
  wait = math.max(0, math.floor(next_at - now))
end
return {wait, first_fence, packed(claimed)}
