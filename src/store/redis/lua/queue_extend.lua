#!lua flags=allow-oom
-- Moves a claimed job's lease deadline to ARGV[4] ms (at most MAX_LEASE_MS) from now, if the lease is still ours.
-- ARGV[2] job id, ARGV[3] lease token, ARGV[4] lease ms.
-- Returns 1 when extended, 0 when the lease is not ours.
local id, token = ARGV[2], ARGV[3]
local holder = redis.call('HGET', LEASES, id)
if not holder or not held_by(holder, token) then
  return 0
end
if holder ~= token then
  -- Its claim's lease holds the batch: the job leaves it for a lease of its own, named by its
  -- id, and the rest of the batch keeps its deadline.
  leave_claim(holder, 1)
  redis.call('HSET', LEASES, id, token)
end
redis.call('ZADD', INFLIGHT, now_ms() + lease_ms(ARGV[4]), id)
return 1
