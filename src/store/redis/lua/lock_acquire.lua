#!lua flags=allow-oom
-- Takes a lock unless another holder has it, and hands out the next fencing token.
-- KEYS[1] the lock, KEYS[2] its fencing counter (both carry the same hash tag).
-- ARGV[1] the holder's token, ARGV[2] the TTL in milliseconds.
-- Returns {1, fencing token} when the lock is ours, {0, remaining TTL in ms or -1} when held.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  -- A re-sent acquire whose first reply was lost: the lock is already ours, and nobody can
  -- have moved the counter since we took it.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2])) or 0}
end
return {0, redis.call('PTTL', KEYS[1])}
