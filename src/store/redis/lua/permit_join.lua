#!lua flags=allow-oom
-- Model: PermitModel::join (src/semaphore/model.rs); tests/permit_model.rs checks the two agree.
-- Puts a waiter in the key's line: at the end, or in the place of the waiter it replaces (a
-- caller that retried, then deferred). Already in line, it keeps its place. Permits freed
-- since the caller found them taken go to the line now.
-- ARGV[3] the waiter, ARGV[4] the waiter it replaces ('' none), ARGV[5] the limit, ARGV[6]
-- the line's cap ('-1' none), ARGV[7] what a full line does ('refuse' or 'drop'; see
-- line_join.lua), ARGV[8] '1' when the waiter is to write.
-- Returns {the waiters permits were reserved for, the waiters dropped, waiters ahead (all of
-- them when refused), 1 when refused for a full line, waiters evicted to make room}.
local waiter, replacing, limit, writes = ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[8] == '1'
-- What ran out goes first: a waiter whose reservation ran out and that joins again (its job
-- was claimed late) leaves the line, then joins it again, rather than joining and then being
-- dropped.
local now = now_ms()
local dropped = prune(now)
local refused, evicted, waiting = make_room(waiter, replacing, tonumber(ARGV[6]) or -1, ARGV[7], function(candidate)
  return redis.call('ZSCORE', PERMITS, '@' .. candidate) ~= false
end)
if refused then
  return {{}, {}, waiting, 1, {}}
end
for _, gone in ipairs(evicted) do
  redis.call('SREM', WRITERS, gone)
end
take_place(waiter, replacing)
mark_first()
if replacing ~= '' then
  redis.call('SREM', WRITERS, replacing)
end
if writes then
  redis.call('SADD', WRITERS, waiter)
else
  redis.call('SREM', WRITERS, waiter)
end
-- The writers live as long as the line (take_place): a writer is never taken for a reader.
redis.call('PEXPIRE', WRITERS, IDLE_MS)
return {hand_to_line(now, limit), dropped, ahead_of(waiter), 0, evicted}
