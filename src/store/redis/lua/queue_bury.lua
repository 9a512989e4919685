#!lua flags=allow-oom
-- Moves a claimed job to the dead-letter set with its reason, if the claimer's lease is still
-- the job's. The job's bytes stay, so it can be inspected and requeued.
-- ARGV[2] job id, ARGV[3] lease token, ARGV[4] reason, ARGV[5] new envelope ('' keeps it),
-- ARGV[6] '1' to count the activity.
-- Returns 1 when buried, 0 when the lease is not ours.
local id = ARGV[2]
if not holds_lease(id, ARGV[3]) then
  return 0
end
end_lease(id)
if ARGV[5] ~= '' then
  redis.call('HSET', JOBS, id, ARGV[5])
end
local now = now_ms()
bury_now(id, ARGV[4], now)
record(ARGV[6], now, {'dead', 1})
return 1
