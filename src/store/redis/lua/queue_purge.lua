#!lua flags=allow-oom
-- Model: QueueModel::purge (src/queue/model/operator.rs); tests/queue_model.rs checks the two agree.
-- Deletes up to ARGV[3] (at most MAX_PAGE) jobs of one set, with their bytes, leases and bury
-- reasons. ARGV[2] the set ('delayed', 'inflight', 'dead' or 'done').
-- Returns how many were deleted (fewer than asked: the set is now empty).
local set = SETS[ARGV[2]]
if not set then
  return redis.error_reply('no such set: ' .. ARGV[2])
end
local most = math.min(tonumber(ARGV[3]), MAX_PAGE)
local ids = {}
if set == INFLIGHT then
  -- Whole leases, in deadline order, until `most` jobs (a lease holds at most MAX_PAGE): the
  -- jobs each still holds go with it. A lease that holds none any more goes too, and does not
  -- count: at most 16 reads of `most` leases.
  for _ = 1, 16 do
    local leases = redis.call('ZRANGE', INFLIGHT, 0, most - 1)
    local ended, taken, counted = {}, {}, 0
    for _, lease in ipairs(leases) do
      if #ids >= most then
        break
      end
      ended[#ended + 1] = lease
      local held, of_ours = held_jobs(lease, true)
      counted = counted + of_ours
      for _, id in ipairs(held) do
        ids[#ids + 1] = id
        taken[#taken + 1] = id
      end
    end
    end_leases(ended, taken, counted)
    if #ids >= most or #leases < most then
      break
    end
  end
  if #ids == 0 then
    return 0
  end
elseif set == DELAYED then
  -- The waiting jobs: the ready ones first (they are due), then the others.
  if grouped() then
    ids = redis.call('ZRANGE', READY, 0, most - 1)
    if #ids > 0 then
      redis.call('ZREM', READY, unpack(ids))
      redis.call('ZREM', READY_DUE, unpack(ids))
      waits().forget_past_turns()
    end
  end
  if #ids < most then
    local later = redis.call('ZRANGE', DELAYED, 0, most - #ids - 1)
    if #later > 0 then
      redis.call('ZREM', DELAYED, unpack(later))
      for _, id in ipairs(later) do
        ids[#ids + 1] = id
      end
    end
  end
  if #ids == 0 then
    return 0
  end
  forget_pending(ids)
else
  ids = redis.call('ZRANGE', set, 0, most - 1)
  if #ids == 0 then
    return 0
  end
  redis.call('ZREM', set, unpack(ids))
end
if set == DONE then
  -- A finished job's id may be in use again by a new job: only its record goes.
  batched('HDEL', FINISHED, ids)
  return #ids
end
batched('HDEL', JOBS, ids)
batched('HDEL', ERRORS, ids)
batched('HDEL', EXPIRIES, ids)
batched('HDEL', HANDED, ids)
batched('HDEL', GROUPS, ids)
return #ids
