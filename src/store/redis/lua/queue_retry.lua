#!lua flags=allow-oom
-- Model: QueueModel::retry (src/queue/model/mod.rs); tests/queue_model.rs checks the two agree.
-- Puts a claimed job back to wait, due ARGV[6] ms from now by the server's clock, if its
-- claim's lease still holds it. Also used at shutdown with a delay of 0.
-- ARGV[2] job id, ARGV[3] its claim's lease, ARGV[4] its position there, ARGV[5] new envelope
-- ('' keeps the stored one), ARGV[6] delay ms, ARGV[7] '1' to count the activity.
-- Returns the due time in ms, or -1 when the lease does not hold the job.
local id = ARGV[2]
if not settle_one(ARGV[3], ARGV[4]) then
  return -1
end
if ARGV[5] ~= '' then
  redis.call('HSET', JOBS, id, ARGV[5])
end
local now = now_ms()
local due = now + tonumber(ARGV[6])
if redis.call('HDEL', HANDED, id) == 1 then
  -- Its lock was handed to it while it ran: its turn is now, ahead of its group's.
  due = now
  waits().hand_now(id, now)
else
  schedule(id, due)
end
-- A new envelope records a failed attempt; without one, the job only waits for its turn.
record(ARGV[7], now, {ARGV[5] ~= '' and 'failed' or 'postponed', 1})
return due
