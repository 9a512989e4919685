#!lua
-- Model: QueueModel::push_many (src/queue/model/mod.rs); tests/queue_model.rs checks the two agree.
-- Stores new jobs (one, for a single push), all due at once by the server's clock, in one call.
-- Refused as a whole when Redis is full (no allow-oom): a push fails rather than evict.
-- ARGV[2] 'in' (ARGV[3] = delay ms) or 'at' (ARGV[3] = epoch ms), ARGV[4] the jobs' group as
-- GROUPS stores it ('<weight> <group>'; '' for none),
-- ARGV[5..] job id 1, envelope 1, job id 2, envelope 2, ... (at most MAX_PAGE jobs).
-- A job whose id is taken (stored before, or earlier in this batch) is skipped.
-- Returns {due ms, {1 or 0 per job: stored, or its id was taken}}.
local now = now_ms()
local due = tonumber(ARGV[3])
if ARGV[2] == 'in' then
  due = now + due
end
local group = ARGV[4]
local ids = {}
for i = 5, math.min(#ARGV, 4 + 2 * MAX_PAGE), 2 do
  ids[#ids + 1] = ARGV[i]
end
if #ids == 0 then
  return {due, {}}
end
local found = redis.call('HMGET', JOBS, unpack(ids))
local stored, seen, jobs, new = {}, {}, {}, {}
for i, id in ipairs(ids) do
  if found[i] or seen[id] then
    stored[i] = 0
  else
    seen[id] = true
    stored[i] = 1
    jobs[#jobs + 1] = id
    jobs[#jobs + 1] = ARGV[4 + 2 * i]
    new[#new + 1] = id
  end
end
if #new == 0 then
  return {due, stored}
end
batched('HSET', JOBS, jobs)
if group ~= '' and waits().join_group(new, group, due, now) then
  return {due, stored}
end
local first = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')[2]
local scheduled = {}
for i, id in ipairs(new) do
  scheduled[2 * i - 1], scheduled[2 * i] = due, id
end
batched('ZADD', DELAYED, scheduled)
-- One wake-up for the batch, when it comes before what sleeping schedulers wait for.
if not first or due < tonumber(first) then
  redis.call('PUBLISH', WAKE, due)
end
return {due, stored}
