#!lua flags=allow-oom
-- Model: QueueModel::ack (src/queue/model/mod.rs); tests/queue_model.rs checks the two agree.
-- Deletes jobs their claimers finished, each only if its claim's lease still holds it.
-- ARGV[2] how many finished jobs to keep (0: none), ARGV[3] for how long, in ms;
-- ARGV[4] '1' to count the activity;
-- ARGV[5..]: job id 1, its claim's lease, its position there, job id 2, ... (at most MAX_PAGE
-- jobs; the claim's reply says both, queue_claim.lua).
-- A finished job that is kept moves its envelope to FINISHED and its id to DONE; the oldest
-- beyond the count or the age are forgotten, a bounded number per call.
-- Returns one string of a '1' or '0' per job, in order: deleted, or the lease does not hold it
-- (it ran out and the job moved on, or the job was settled before: a job given twice is
-- deleted once). One string, not a value per job: each value of a reply costs the client.
local keep, keep_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
-- Each lease's flags are read once, as bytes, changed, and written once at the end.
local flags_of, settled, leases = {}, {}, {}
local done, acked = {}, {}
for i = 5, math.min(#ARGV, 4 + 3 * MAX_PAGE), 3 do
  local lease, at = ARGV[i + 1], position(ARGV[i + 2])
  local flags = flags_of[lease]
  if flags == nil then
    flags = redis.call('HGET', CLAIMS, lease .. '@')
    flags_of[lease] = flags
  end
  if holds_at(flags, at) and not (settled[lease] and settled[lease][at]) then
    if not settled[lease] then
      settled[lease] = {}
      leases[#leases + 1] = lease
    end
    settled[lease][at] = true
    done[#done + 1] = ARGV[i]
    acked[#acked + 1] = '1'
  else
    acked[#acked + 1] = '0'
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
  for _, lease in ipairs(leases) do
    local at = {}
    for p in pairs(settled[lease]) do
      at[#at + 1] = p
    end
    settle(lease, flags_of[lease], at)
  end
  count_held(-#done)
  redis.call('HDEL', JOBS, unpack(done))
  -- Mostly all absent: one look at the keys costs less than handing each every id.
  if redis.call('EXISTS', EXPIRIES, HANDED, GROUPS) > 0 then
    redis.call('HDEL', EXPIRIES, unpack(done))
    redis.call('HDEL', HANDED, unpack(done))
    redis.call('HDEL', GROUPS, unpack(done))
  end
  record(ARGV[4], now, {'done', #done})
end
return table.concat(acked)
