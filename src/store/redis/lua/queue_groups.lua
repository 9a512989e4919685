#!lua flags=no-writes
-- Reads how many jobs wait per group, the largest groups first (ties by name).
-- ARGV[2] most groups (at most MAX_PAGE).
-- Returns {how many groups have waiting jobs, {group, waiting, group, waiting, ...}}.
local most = math.max(0, math.min(tonumber(ARGV[2]), MAX_PAGE))
local groups = {}
if most > 0 then
  groups = redis.call('ZRANGE', GROUP_WAITING, '+inf', '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, most, 'WITHSCORES')
end
return {redis.call('ZCARD', GROUP_WAITING), groups}
