#!lua flags=allow-oom
-- Model: QueueModel::bury (src/queue/model/mod.rs); tests/queue_model.rs checks the two agree.
-- Moves a claimed job to the dead-letter set with its reason, if its claim's lease still holds
-- it. The job's bytes stay, so it can be inspected and requeued.
-- ARGV[2] job id, ARGV[3] its claim's lease, ARGV[4] its position there, ARGV[5] reason,
-- ARGV[6] new envelope ('' keeps it), ARGV[7] '1' to count the activity.
-- Returns 1 when buried, 0 when the lease does not hold the job.
local id = ARGV[2]
if not settle_one(ARGV[3], ARGV[4]) then
  return 0
end
if ARGV[6] ~= '' then
  redis.call('HSET', JOBS, id, ARGV[6])
end
local now = now_ms()
bury_now(id, ARGV[5], now)
record(ARGV[7], now, {'dead', 1})
return 1
