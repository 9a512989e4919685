#!lua flags=allow-oom
-- Model: LockModel::acquire_set (src/lock_set/model.rs); tests/lock_model.rs checks the two agree.
-- Takes every key of a set, or none: each must be free for the caller (free with nobody in
-- line before it, or reserved for it, or already its own: a re-sent acquire). Then each gets
-- the holder's token for the TTL and its next fencing token.
-- ARGV[3] the holder's token, ARGV[4] the TTL in ms, ARGV[5] the caller's place in the lines
-- ('' when it is not in line); then each key's channel (set_prelude.lua).
--
-- The lines of a set keep one order: a set joins all its lines in one step (set_join.lua), so
-- two waiters that share keys stand in the same order in each line they share, and the first
-- of them is handed every key they share before the second: no two waiters wait for each
-- other. A waiter found in some of its lines and not in the others (a reservation of one key
-- ran out unused, and the next attempt on that key dropped it) would break that order: it
-- leaves every line and joins them all again at the end, as if it came now.
--
-- Returns {1, {fencing token per key}} when the set is ours; {0, {{key index, remaining ms
-- (-1: no TTL), waiters ahead, typical hold ms (-1: unknown), 1 when reserved for another
-- waiter rather than held} per key not free for the caller}, handed, dropped} when not, where
-- handed and dropped are {key index, waiter} pairs (set_prelude.lua).
local token, ttl, waiter = ARGV[3], ARGV[4], ARGV[5]

if waiter ~= '' then
  local in_line, missing = false, false
  for i = 1, SET_SIZE do
    select_key(i)
    if redis.call('ZSCORE', WAITERS, waiter) then
      in_line = true
    else
      missing = true
    end
  end
  if in_line and missing then
    for i = 1, SET_SIZE do
      select_key(i)
      leave_selected(i, waiter)
    end
    for i = 1, SET_SIZE do
      select_key(i)
      join_selected(i, waiter, '')
    end
  end
end

-- Whether the selected key (the set's `i`-th) is free for the caller; a free key that others
-- wait for is handed to the first of them now (nobody handed it: a holder's TTL ran out).
local function free_for_caller(i)
  local current = redis.call('GET', LOCK)
  if current then
    return current == token or current == token .. LINE_MARK or (waiter ~= '' and current == '@' .. waiter)
  end
  local head = redis.call('ZRANGE', WAITERS, 0, 0)[1]
  if not head or head == waiter then
    return true
  end
  local reserved, gone = hand_to_head(true)
  note_handoff(i, reserved, gone)
  -- Free for the caller too when nobody is left in line (the one whose reservation ran out
  -- was dropped).
  return reserved == '' or reserved == waiter
end

local blocked = {}
for i = 1, SET_SIZE do
  select_key(i)
  if not free_for_caller(i) then
    local current = redis.call('GET', LOCK)
    local reserved = current and string.sub(current, 1, 1) == '@' and 1 or 0
    local remaining = current and redis.call('PTTL', LOCK) or tonumber(RESERVATION_MS)
    local hold = tonumber(redis.call('GET', HOLDS)) or -1
    blocked[#blocked + 1] = {i, remaining, ahead_of(waiter), hold, reserved}
  end
end

if #blocked > 0 then
  -- A caller first in every line of its set waits only for holders. The keys reserved for it
  -- go back to free, with the caller first in their lines: nobody behind it takes them (an
  -- attempt on one hands it to the caller again, and wakes it), and no reservation runs out
  -- under a caller that waits longer than one lasts (a deferred job keeps its place however
  -- long the holders of its other keys take). One that others wait before in some line passes
  -- the keys reserved for it to the next behind it, so that they do not idle while it waits;
  -- it stays first in their lines, and is handed them again at their next release. The first
  -- to come of all the waiters is first in all its lines: it is never passed over, and no
  -- waiter starves.
  if waiter ~= '' then
    local first_everywhere = true
    for i = 1, SET_SIZE do
      select_key(i)
      if redis.call('ZRANGE', WAITERS, 0, 0)[1] ~= waiter then
        first_everywhere = false
      end
    end
    for i = 1, SET_SIZE do
      select_key(i)
      if redis.call('GET', LOCK) == '@' .. waiter then
        if first_everywhere then
          redis.call('DEL', LOCK, HANDOFF)
        else
          note_handoff(i, pass_after(waiter))
        end
      end
    end
  end
  return {0, blocked, handed, dropped}
end

local fences = {}
for i = 1, SET_SIZE do
  select_key(i)
  fences[i] = take(token, ttl, waiter)
end
return {1, fences}
