#!lua flags=allow-oom
-- Deletes a lock if the caller still holds it.
-- KEYS[1] the lock. ARGV[1] the holder's token.
-- Returns 1 when deleted, 0 when the lock is gone or another holder's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
