#!lua flags=allow-oom
-- Resets a lock's TTL if the caller still holds it.
-- KEYS[1] the lock. ARGV[1] the holder's token, ARGV[2] the TTL in milliseconds.
-- Returns 1 when extended, 0 when the lock is gone or another holder's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
