#!lua flags=allow-oom
-- Deletes up to ARGV[3] (at most MAX_PAGE) jobs of one set, with their bytes, leases and bury
-- reasons. ARGV[2] the set ('delayed', 'inflight', 'dead' or 'done').
-- Returns how many were deleted (fewer than asked: the set is now empty).
local set = SETS[ARGV[2]]
if not set then
  return redis.error_reply('no such set: ' .. ARGV[2])
end
local ids = redis.call('ZRANGE', set, 0, math.min(tonumber(ARGV[3]), MAX_PAGE) - 1)
if #ids == 0 then
  return 0
end
redis.call('ZREM', set, unpack(ids))
if set == DONE then
  -- A finished job's id may be in use again by a new job: only its record goes.
  redis.call('HDEL', FINISHED, unpack(ids))
  return #ids
end
redis.call('HDEL', JOBS, unpack(ids))
redis.call('HDEL', ERRORS, unpack(ids))
redis.call('HDEL', LEASES, unpack(ids))
redis.call('HDEL', EXPIRIES, unpack(ids))
redis.call('HDEL', HANDED, unpack(ids))
return #ids
