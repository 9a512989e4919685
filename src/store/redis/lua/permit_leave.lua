#!lua flags=allow-oom
-- Model: PermitModel::leave (src/semaphore/model.rs); tests/permit_model.rs checks the two agree.
-- Takes a waiter out of the key's line (it gave up, or its job is gone); a permit reserved
-- for it goes to the next in line.
-- ARGV[3] the waiter, ARGV[4] the limit.
-- Returns the waiters permits were reserved for.
local waiter, limit = ARGV[3], tonumber(ARGV[4])
redis.call('ZREM', WAITERS, waiter)
redis.call('SREM', WRITERS, waiter)
redis.call('ZREM', PERMITS, '@' .. waiter)
local now = now_ms()
prune(now)
return hand_to_line(now, limit)
