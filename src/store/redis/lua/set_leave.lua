#!lua flags=allow-oom
-- Model: LockModel::leave_set (src/lock_set/model.rs); tests/lock_model.rs checks the two agree.
-- Takes a waiter out of the line of every key of a set (it gave up, or its job is gone); a
-- key reserved for it goes to the next in line.
-- ARGV[3] the waiter; then each key's channel (set_prelude.lua).
-- Returns the keys handed on: {key index, waiter} pairs.
local waiter = ARGV[3]
for i = 1, SET_SIZE do
  select_key(i)
  leave_selected(i, waiter)
end
return handed
