-- Deletes a job its claimer finished, if the claimer's lease is still the job's.
-- KEYS[1] inflight, KEYS[2] jobs, KEYS[3] leases. ARGV[1] job id, ARGV[2] lease token.
-- Returns 1 when deleted, 0 when the lease is not ours (it ran out and the job moved on).
if redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
