#!lua flags=allow-oom
-- Deletes jobs their claimers finished, each only if that claimer's lease is still the job's.
-- ARGV[2] how many finished jobs to keep (0: none), ARGV[3] for how long, in ms;
-- ARGV[4] '1' to count the activity;
-- ARGV[5..]: job id 1, lease token 1, job id 2, lease token 2, ... (at most MAX_PAGE jobs).
-- A finished job that is kept moves its envelope to FINISHED and its id to DONE; the oldest
-- beyond the count or the age are forgotten, a bounded number per call.
-- Returns one 1 or 0 per job: deleted, or the lease is not ours (it ran out and the job moved on).
local keep, keep_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local ids = {}
for i = 5, math.min(#ARGV, 4 + 2 * MAX_PAGE), 2 do
  ids[#ids + 1] = ARGV[i]
end
if #ids == 0 then
  return {}
end
local holders = redis.call('HMGET', LEASES, unpack(ids))
-- The jobs each claim lease lets go of, and the jobs with leases of their own.
-- An id given twice is counted once: a claim lease counted down too far would leave its
-- other jobs without an entry, in flight forever.
local done, acked, left, own, seen = {}, {}, {}, {}, {}
for i, id in ipairs(ids) do
  local holder = holders[i]
  if seen[id] then
    acked[i] = acked[seen[id]]
  elseif holder and held_by(holder, ARGV[4 + 2 * i]) then
    seen[id] = i
    done[#done + 1] = id
    acked[i] = 1
    if is_claim(holder) then
      left[holder] = (left[holder] or 0) + 1
    else
      own[#own + 1] = id
    end
  else
    seen[id] = i
    acked[i] = 0
  end
end
if #done > 0 then
  local now = now_ms()
  if keep > 0 then
    local envelopes = redis.call('HMGET', JOBS, unpack(done))
    local finished, members = {}, {}
    for i, id in ipairs(done) do
      if envelopes[i] then
        finished[#finished + 1] = id
        finished[#finished + 1] = envelopes[i]
      end
      members[#members + 1] = now
      members[#members + 1] = id
    end
    batched('HSET', FINISHED, finished)
    batched('ZADD', DONE, members)
    -- Forget the oldest: those past the age, then those beyond the count. At most MAX_PAGE
    -- each, which is at least as many as this call added.
    local old = redis.call('ZRANGEBYSCORE', DONE, '-inf', '(' .. (now - keep_ms), 'LIMIT', 0, MAX_PAGE)
    local over = redis.call('ZCARD', DONE) - #old - keep
    if over > 0 then
      local extra = redis.call('ZRANGE', DONE, #old, #old + math.min(over, MAX_PAGE) - 1)
      for _, id in ipairs(extra) do old[#old + 1] = id end
    end
    batched('ZREM', DONE, old)
    batched('HDEL', FINISHED, old)
  end
  for claim, n in pairs(left) do
    leave_claim(claim, n)
  end
  batched('ZREM', INFLIGHT, own)
  redis.call('HDEL', JOBS, unpack(done))
  redis.call('HDEL', LEASES, unpack(done))
  -- Mostly all absent: one look at the keys costs less than handing each every id.
  if redis.call('EXISTS', EXPIRIES, HANDED, GROUPS) > 0 then
    redis.call('HDEL', EXPIRIES, unpack(done))
    redis.call('HDEL', HANDED, unpack(done))
    redis.call('HDEL', GROUPS, unpack(done))
  end
  record(ARGV[4], now, {'done', #done})
end
return acked
