#!lua flags=allow-oom
-- Model: LockModel::join (src/lock/model/mod.rs); tests/lock_model.rs checks the two agree.
-- Puts a waiter in the key's line: at the end, or in the place of the waiter it replaces (a
-- caller that retried, then deferred). Already in line, it keeps its place.
-- ARGV[3] the waiter, ARGV[4] the waiter it replaces ('' none), ARGV[5] the line's cap ('-1'
-- none), ARGV[6] what a full line does ('refuse' or 'drop'; see line_join.lua).
-- The key may have been released since the caller found it held, with nobody in line to hand
-- it to: then it is handed over now.
-- Returns {waiter the key was just handed to (''), waiter dropped (''), waiters ahead (all of
-- them when refused), 1 when refused for a full line, waiters evicted to make room}.
local waiter, replacing = ARGV[3], ARGV[4]
local refused, evicted, waiting = make_room(waiter, replacing, tonumber(ARGV[5]) or -1, ARGV[6], function(candidate)
  return redis.call('GET', LOCK) == '@' .. candidate
end)
if refused then
  return {'', '', waiting, 1, {}}
end
forget_old_handoff(waiter)
take_place(waiter, replacing)
local reserved, dropped = '', ''
local current = redis.call('GET', LOCK)
if not current then
  reserved, dropped = hand_to_head(true)
elseif string.sub(current, 1, 1) ~= '@' and string.sub(current, -#LINE_MARK) ~= LINE_MARK then
  -- Held: its release must now hand it over.
  redis.call('SET', LOCK, current .. LINE_MARK, 'KEEPTTL')
end
return {reserved, dropped, ahead_of(waiter), 0, evicted}
