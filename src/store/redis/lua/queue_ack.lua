-- Deletes jobs their claimers finished, each only if that claimer's lease is still the job's.
-- KEYS[1] inflight, KEYS[2] jobs, KEYS[3] leases, KEYS[4] expiries.
-- ARGV: job id 1, lease token 1, job id 2, lease token 2, ... (bounded by the caller).
-- Returns one 1 or 0 per job: deleted, or the lease is not ours (it ran out and the job moved on).
local ids = {}
for i = 1, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
end
local holders = redis.call('HMGET', KEYS[3], unpack(ids))
local done, acked = {}, {}
for i, id in ipairs(ids) do
  if holders[i] == ARGV[2 * i] then
    done[#done + 1] = id
    acked[i] = 1
  else
    acked[i] = 0
  end
end
if #done > 0 then
  redis.call('ZREM', KEYS[1], unpack(done))
  redis.call('HDEL', KEYS[2], unpack(done))
  redis.call('HDEL', KEYS[3], unpack(done))
  redis.call('HDEL', KEYS[4], unpack(done))
end
return acked
