#!lua flags=allow-oom
-- Model: QueueModel::cancel (src/queue/model/mod.rs); tests/queue_model.rs checks the two agree.
-- Deletes a job that is waiting or dead. A job being handled cannot be cancelled.
-- ARGV[2] job id.
-- Returns 1 when deleted, 0 when there is no such job, -1 when it is being handled.
local id = ARGV[2]
if in_flight(id) then
  return -1
end
local removed = (waits().unwait(id) and 1 or 0) + redis.call('ZREM', DEAD, id)
forget_pending({id})
redis.call('HDEL', GROUPS, id)
redis.call('HDEL', ERRORS, id)
redis.call('HDEL', EXPIRIES, id)
return redis.call('HDEL', JOBS, id) + removed > 0 and 1 or 0
