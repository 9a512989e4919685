-- Deletes up to ARGV[1] jobs of one set, with their bytes, leases and bury reasons.
-- KEYS[1] the set (delayed, inflight or dead), KEYS[2] jobs, KEYS[3] errors, KEYS[4] leases,
-- KEYS[5] expiries.
-- Returns how many were deleted (fewer than ARGV[1]: the set is now empty).
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then
  return 0
end
redis.call('ZREM', KEYS[1], unpack(ids))
redis.call('HDEL', KEYS[2], unpack(ids))
redis.call('HDEL', KEYS[3], unpack(ids))
redis.call('HDEL', KEYS[4], unpack(ids))
redis.call('HDEL', KEYS[5], unpack(ids))
return #ids
