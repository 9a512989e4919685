#!lua flags=allow-oom
-- Moves a claimed job's lease deadline to ARGV[4] ms (at most MAX_LEASE_MS) from now, if the lease is still ours.
-- ARGV[2] job id, ARGV[3] lease token, ARGV[4] lease ms.
-- Returns 1 when extended, 0 when the lease is not ours.
if not holds_lease(ARGV[2], ARGV[3]) then
  return 0
end
redis.call('ZADD', INFLIGHT, 'XX', now_ms() + lease_ms(ARGV[4]), ARGV[2])
return 1
