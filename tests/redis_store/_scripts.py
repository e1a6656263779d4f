"""The Lua scripts that make each session write and lease call one atomic step in Redis.

Keys of one session store (prefix ``P``): ``P:s:<id>`` a hash (``created``,
``updated`` in µs of the server's ``TIME``, ``model``, ``prompt``, ``data``
absent for ``None``, ``final``, ``status``, ``total``); ``P:rev:<id>`` the
revision counter (outlives ``delete_session``); ``P:order:`` a sorted set of
ids by write sequence ``P:seq:``; ``P:lease:<id>`` a hash (``owner``,
``token``, ``expires`` in µs, ``released``), never deleted, so tokens only grow.
"""

from __future__ import annotations

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
"""

# A fence (ARGV[3] owner, ARGV[4] token; '' = unfenced) refuses unless the session's
# latest grant is that very lease; the grant is returned so the caller can say why.
_FENCE = """
if ARGV[3] ~= '' then
  local g = redis.call('HMGET', KEYS[5], 'owner', 'token', 'released')
  if g[2] == false or g[1] ~= ARGV[3] or g[2] ~= ARGV[4] then
    return {'fence', g[1] or '', g[2] or '', g[3] or ''}
  end
end
"""

WRITE = (
    _FENCE
    + _NOW
    + """
-- KEYS: hash, rev, order, seq, lease. ARGV: 1 id, 2 mode, 3-4 fence, 5 expected rev ('' any),
-- then put: model, prompt, data; data: data; final: summary json, status, step count.
local rev = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[5] ~= '' and tostring(rev) ~= ARGV[5] then
  return {'conflict', tostring(rev)}
end
rev = redis.call('INCR', KEYS[2])
local seq = redis.call('INCR', KEYS[4])
local stamp = string.format('%d', now)
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'created', stamp, 'total', 0, 'model', '', 'prompt', '')
end
redis.call('HSET', KEYS[1], 'updated', stamp)
redis.call('ZADD', KEYS[3], seq, ARGV[1])
local mode = ARGV[2]
local data = nil
if mode == 'put' then
  redis.call('HSET', KEYS[1], 'model', ARGV[6], 'prompt', ARGV[7])
  data = ARGV[8]
elseif mode == 'data' then
  data = ARGV[6]
else
  redis.call('HSET', KEYS[1], 'final', ARGV[6], 'status', ARGV[7])
  redis.call('HINCRBY', KEYS[1], 'total', ARGV[8])
end
if data == '' then
  redis.call('HDEL', KEYS[1], 'data')
elseif data ~= nil then
  redis.call('HSET', KEYS[1], 'data', data)
end
return {'ok', tostring(rev)}
"""
)

DELETE = (
    _FENCE
    + """
-- KEYS: hash, rev, order, seq, lease, and the steps list for a combined store.
-- ARGV: 1 id, 2 unused, 3-4 fence.
local had_steps = 0
if #KEYS >= 6 then
  had_steps = redis.call('DEL', KEYS[6])
end
if redis.call('DEL', KEYS[1]) == 0 then
  return {'ok', tostring(had_steps)}
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('INCR', KEYS[2])
return {'ok', '1'}
"""
)

FENCED_APPEND = """
-- KEYS: 1 the leased session's lease, then one steps list per step. ARGV: 1 owner, 2 token,
-- then one encoded step per list. Appends all of them only if the lease is still the latest.
local g = redis.call('HMGET', KEYS[1], 'owner', 'token', 'released')
if g[2] == false or g[1] ~= ARGV[1] or g[2] ~= ARGV[2] then
  return {'fence', g[1] or '', g[2] or '', g[3] or ''}
end
for i = 2, #KEYS do
  redis.call('RPUSH', KEYS[i], ARGV[i + 1])
end
return {'ok'}
"""

LIST = """
-- KEYS: order. ARGV: 1 limit, 2 hash key prefix.
local ids = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local rows = {}
for i, id in ipairs(ids) do
  local f = redis.call('HMGET', ARGV[2] .. id, 'status', 'total', 'created', 'updated')
  rows[i] = {id, f[1] or '', f[2], f[3], f[4]}
end
return rows
"""

ACQUIRE = (
    _NOW
    + """
-- KEYS: lease. ARGV: 1 owner, 2 ttl in µs. Returns {token, expires}; token 0: held by another.
local g = redis.call('HMGET', KEYS[1], 'owner', 'token', 'expires', 'released')
local token = 1
if g[2] ~= false then
  token = tonumber(g[2])
  if g[4] == '0' and now < tonumber(g[3]) then
    if g[1] ~= ARGV[1] then
      return {0, ''}
    end
  else
    token = token + 1
  end
end
local expires = string.format('%d', now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'expires', expires, 'released', 0)
return {token, expires}
"""
)

RENEW = (
    _NOW
    + """
-- KEYS: lease. ARGV: 1 owner, 2 token, 3 ttl in µs. {'ok', expires} or the grant that refused.
local g = redis.call('HMGET', KEYS[1], 'owner', 'token', 'released')
if g[2] == false or g[1] ~= ARGV[1] or g[2] ~= ARGV[2] or g[3] ~= '0' then
  return {'no', g[1] or '', g[2] or '', g[3] or ''}
end
local expires = string.format('%d', now + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'expires', expires)
return {'ok', expires}
"""
)

RELEASE = """
-- KEYS: lease. ARGV: 1 owner, 2 token. Frees it if it is the latest grant; returns the grant.
local g = redis.call('HMGET', KEYS[1], 'owner', 'token', 'released')
if g[2] ~= false and g[1] == ARGV[1] and g[2] == ARGV[2] then
  redis.call('HSET', KEYS[1], 'released', 1)
end
return {g[1] or '', g[2] or '', g[3] or ''}
"""
