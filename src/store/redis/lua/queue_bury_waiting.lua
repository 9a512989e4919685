#!lua flags=allow-oom
-- Model: QueueModel::bury_waiting (src/queue/model/mod.rs); tests/queue_model.rs checks the two agree.
-- Moves a waiting job to the dead-letter set with its reason: a full line dropped it to make
-- room for a newer request. The job's bytes stay, so it can be inspected and requeued.
-- ARGV[2] job id, ARGV[3] reason, ARGV[4] '1' to count the activity.
-- Returns 1 when buried, 0 when it was not waiting (claimed meanwhile, or gone).
local id = ARGV[2]
if not waits().unwait(id) then
  return 0
end
forget_pending({id})
local now = now_ms()
bury_now(id, ARGV[3], now)
record(ARGV[4], now, {'dead', 1, 'superseded', 1})
return 1
