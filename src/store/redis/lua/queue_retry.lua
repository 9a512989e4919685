#!lua flags=allow-oom
-- Puts a claimed job back to wait, due ARGV[5] ms from now by the server's clock, if the
-- claimer's lease is still the job's. Also used at shutdown with a delay of 0.
-- ARGV[2] job id, ARGV[3] lease token, ARGV[4] new envelope ('' keeps the stored one),
-- ARGV[5] delay ms, ARGV[6] '1' to count the activity.
-- Returns the due time in ms, or -1 when the lease is not ours.
local id = ARGV[2]
if not holds_lease(id, ARGV[3]) then
  return -1
end
end_lease(id)
if ARGV[4] ~= '' then
  redis.call('HSET', JOBS, id, ARGV[4])
end
local now = now_ms()
local due = now + tonumber(ARGV[5])
if redis.call('HDEL', HANDED, id) == 1 then
  -- Its lock was handed to it while it ran: its turn is now, ahead of its group's.
  due = now
  waits().hand_now(id, now)
else
  schedule(id, due)
end
-- A new envelope records a failed attempt; without one, the job only waits for its turn.
record(ARGV[6], now, {ARGV[4] ~= '' and 'failed' or 'postponed', 1})
return due
