#!lua
-- Stores a new job and schedules it, by the server's clock.
-- ARGV[2] job id, ARGV[3] envelope, ARGV[4] 'in' (ARGV[5] = delay ms) or 'at' (ARGV[5] = epoch ms).
-- Returns {1, due ms} when stored, {0, 0} when the id is taken (nothing written).
local id = ARGV[2]
if redis.call('HEXISTS', JOBS, id) == 1 then
  return {0, 0}
end
local due = tonumber(ARGV[5])
if ARGV[4] == 'in' then
  due = now_ms() + due
end
redis.call('HSET', JOBS, id, ARGV[3])
schedule(id, due)
return {1, due}
