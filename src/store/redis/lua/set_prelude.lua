-- Model: the set's model (src/lock_set/model.rs); tests/lock_model.rs checks the two agree.
-- The prelude of every script on a set of lock keys taken together (set_acquire.lua,
-- set_join.lua, set_leave.lua), after the lock's prelude, line.lua and line_join.lua. Each key
-- of the set brings its five keys in KEYS, in the lock prelude's order, one key after the
-- other; its announcement channel is among the last ARGV, in the same order. The steps of the
-- lock's prelude and of the line act on the key `select_key` chose last: it points the
-- prelude's names (LOCK, FENCE, WAITERS, HANDOFF, HOLDS, WAKE) at that key.

-- How many lock keys the set has.
local SET_SIZE = #KEYS / 5

-- Points the lock prelude's names at the set's `i`-th key (from 1).
local function select_key(i)
  local base = 5 * (i - 1)
  LOCK, FENCE, WAITERS, HANDOFF, HOLDS = KEYS[base + 1], KEYS[base + 2], KEYS[base + 3], KEYS[base + 4], KEYS[base + 5]
  WAKE = ARGV[#ARGV - SET_SIZE + i]
end

-- What handing keys over did, for the store to finish (promote a job handed a key, count a
-- reservation that ran out): {key index, waiter} pairs.
local handed, dropped = {}, {}

-- Notes what hand_to_head did on the selected key `i`.
local function note_handoff(i, reserved, gone)
  if reserved ~= '' then
    handed[#handed + 1] = {i, reserved}
  end
  if gone ~= '' then
    dropped[#dropped + 1] = {i, gone}
  end
end

-- Puts `waiter` in the selected key's line (take_place), marking a holder's value so that its
-- release hands the key over, or handing a free key to the head of its line (the selected key
-- is the set's `i`-th).
local function join_selected(i, waiter, replacing)
  forget_old_handoff(waiter)
  take_place(waiter, replacing)
  local current = redis.call('GET', LOCK)
  if not current then
    note_handoff(i, hand_to_head(true))
  elseif string.sub(current, 1, 1) ~= '@' and string.sub(current, -#LINE_MARK) ~= LINE_MARK then
    redis.call('SET', LOCK, current .. LINE_MARK, 'KEEPTTL')
  end
end

-- Takes `waiter` out of the selected key's line (the set's `i`-th); a key reserved for it goes
-- to the next in line.
local function leave_selected(i, waiter)
  redis.call('ZREM', WAITERS, waiter)
  if redis.call('GET', LOCK) == '@' .. waiter then
    note_handoff(i, hand_to_head(false))
  end
end

-- Passes the selected key, reserved for `waiter`, to the next in line behind it: `waiter`
-- still waits for keys that others before it wait for too, and would keep this one idle all
-- that time. Without anyone behind, the key is free. Returns the waiter it went to ('' none)
-- and, for note_handoff, no waiter dropped.
local function pass_after(waiter)
  local rank = redis.call('ZRANK', WAITERS, waiter)
  local next_in_line = rank and redis.call('ZRANGE', WAITERS, rank + 1, rank + 1)[1]
  if not next_in_line then
    redis.call('DEL', LOCK, HANDOFF)
    return '', ''
  end
  redis.call('SET', LOCK, '@' .. next_in_line, 'PX', RESERVATION_MS)
  redis.call('SET', HANDOFF, next_in_line, 'PX', IDLE_MS)
  redis.call('PUBLISH', WAKE, next_in_line)
  return next_in_line, ''
end

-- The set's script itself follows.
