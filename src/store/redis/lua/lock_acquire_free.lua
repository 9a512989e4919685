#!lua flags=allow-oom
-- The acquire of a caller not in line, in one call: the common case. Takes only the three
-- keys it touches, not the lock prelude (the fewer keys and arguments, the cheaper the call);
-- fence.lua is before it. A key whose line is not empty is not free for a newcomer, even once
-- a holder's TTL ran out: the first in line has it (lock_acquire.lua decides then).
-- KEYS[1] the lock, KEYS[2] its fencing counter, KEYS[3] its line; ARGV[1] the caller's
-- token, ARGV[2] the TTL in ms, ARGV[3] '1' to hand out a fencing token.
-- Returns the fencing token once taken (0 when not fenced), -1 when the key is held or others
-- wait in line.
if redis.call('EXISTS', KEYS[3]) == 1 then
  return -1
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return -1
end
if ARGV[3] == '1' then
  return next_fences(KEYS[2], 1)
end
return 0
