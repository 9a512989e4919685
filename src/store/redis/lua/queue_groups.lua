#!lua flags=no-writes
-- Model: QueueModel::groups (src/queue/model/operator.rs); tests/queue_model.rs checks the two agree.
-- Reads each group's backlog, the largest first (ties by name, the last first): how many of
-- its jobs are due and wait for their turn. Read from the groups' next tags, not counted by
-- the claims (which touch no state per group): a group's ready jobs hold the tags from about
-- the virtual time (the lowest tag ready) up to its next tag, 1/weight apart, so they number
-- (next tag - virtual time) * weight, rounded down. Exact while none of the group's ready jobs
-- left the line out of its turn (cancelled, buried, purged, moved or handed its key: such a
-- job counts until the group's turns pass its tag).
-- ARGV[2] most groups (at most MAX_PAGE).
-- Returns {how many groups have due jobs, {group, count, group, count, ...}}. Of the groups
-- with the MAX_PAGE highest next tags; beyond them, the count of groups is an upper bound.
local most = math.max(0, math.min(tonumber(ARGV[2]), MAX_PAGE))
local lowest = redis.call('ZRANGEBYSCORE', READY, '(-inf', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
local virtual = tonumber(lowest[2])
if not virtual then
  return {0, {}}
end
local above = '(' .. virtual
local found = redis.call('ZRANGE', GROUP_TAGS, '+inf', above, 'BYSCORE', 'REV', 'LIMIT', 0, MAX_PAGE, 'WITHSCORES')
local counts, names = {}, {}
for i = 1, #found, 2 do
  if found[i] ~= '' then
    local group, weight = waits().group_of(found[i])
    local count = math.floor((tonumber(found[i + 1]) - virtual) * weight + 1e-6)
    if count > 0 then
      if not counts[group] then
        names[#names + 1] = group
        counts[group] = 0
      end
      counts[group] = counts[group] + count
    end
  end
end
table.sort(names, function(a, b)
  return counts[a] > counts[b] or (counts[a] == counts[b] and a > b)
end)
local largest = {}
for i = 1, math.min(#names, most) do
  largest[2 * i - 1], largest[2 * i] = names[i], counts[names[i]]
end
local unread = redis.call('ZCOUNT', GROUP_TAGS, above, '+inf') - #found / 2
return {#names + math.max(0, unread), largest}
