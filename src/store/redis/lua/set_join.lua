#!lua flags=allow-oom
-- Model: LockModel::join_set (src/lock_set/model.rs); tests/lock_model.rs checks the two agree.
-- Puts a waiter in the line of every key of a set, in one step: at the end of each, or in the
-- place of the waiter it replaces (a caller that retried, then deferred). Already in a line,
-- it keeps its place there. A key released meanwhile with nobody in line is handed over now.
-- ARGV[3] the waiter, ARGV[4] the waiter it replaces ('' none), ARGV[5] each line's cap ('-1'
-- none), ARGV[6] what a full line does ('refuse' or 'drop'; see line_join.lua); then each
-- key's channel (set_prelude.lua). A line that would refuse the waiter refuses it for the
-- whole set: no line changes.
-- Returns {handed, dropped ({key index, waiter} pairs), waiters ahead in the longest line (all
-- of them when refused), 1 when refused for a full line, waiters evicted to make room}.
local waiter, replacing, max, overflow = ARGV[3], ARGV[4], tonumber(ARGV[5]) or -1, ARGV[6]

local evictions, most_ahead = {}, 0
for i = 1, SET_SIZE do
  select_key(i)
  local refused, evicted, waiting = room_for(waiter, replacing, max, overflow, function(candidate)
    return redis.call('GET', LOCK) == '@' .. candidate
  end)
  if refused then
    return {{}, {}, waiting, 1, {}}
  end
  evictions[i] = evicted
end

local evicted_all = {}
for i = 1, SET_SIZE do
  select_key(i)
  for _, gone in ipairs(evictions[i]) do
    redis.call('ZREM', WAITERS, gone)
    evicted_all[#evicted_all + 1] = gone
  end
  join_selected(i, waiter, replacing)
  most_ahead = math.max(most_ahead, ahead_of(waiter))
end
return {handed, dropped, most_ahead, 0, evicted_all}
