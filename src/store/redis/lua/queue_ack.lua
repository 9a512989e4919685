#!lua flags=allow-oom
-- Deletes jobs their claimers finished, each only if that claimer's lease is still the job's.
-- ARGV[2..]: job id 1, lease token 1, job id 2, lease token 2, ... (at most MAX_PAGE jobs).
-- Returns one 1 or 0 per job: deleted, or the lease is not ours (it ran out and the job moved on).
local ids = {}
for i = 2, math.min(#ARGV, 1 + 2 * MAX_PAGE), 2 do
  ids[#ids + 1] = ARGV[i]
end
if #ids == 0 then
  return {}
end
local holders = redis.call('HMGET', LEASES, unpack(ids))
local done, acked = {}, {}
for i, id in ipairs(ids) do
  if holders[i] == ARGV[1 + 2 * i] then
    done[#done + 1] = id
    acked[i] = 1
  else
    acked[i] = 0
  end
end
if #done > 0 then
  redis.call('ZREM', INFLIGHT, unpack(done))
  redis.call('HDEL', JOBS, unpack(done))
  redis.call('HDEL', LEASES, unpack(done))
  redis.call('HDEL', EXPIRIES, unpack(done))
  redis.call('HDEL', HANDED, unpack(done))
end
return acked
