-- shardsub: publish with history. KEYS[1] meta hash, KEYS[2] stream.
-- ARGV: 1 server channel, 2 payload, 3 max_len, 4 max_age (s),
-- 5 PUBLISH|SPUBLISH, 6 'c' on a cluster (the node is checked), else ''
local m = redis.call('HMGET', KEYS[1], 'e', 'n', 'o', 'h')
local epoch = m[1]
local node = ''
if ARGV[6] == 'c' then
  node = string.sub(redis.call('CLUSTER', 'MYID'), 1, 16)
end
local function now()
  local t = redis.call('TIME')
  return t[1] .. string.sub('00000' .. t[2], -6)
end
if not epoch then
  epoch = now()
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'e', epoch, 'n', node)
elseif (m[2] or '') ~= node then
  -- Another node wrote last (a failover, a slot move): it may have had
  -- writes this one lacks, so the offsets after o begin a new epoch. The
  -- stream is kept; h lists the last 4 epochs and where each ended.
  local h = (m[4] or '') .. epoch .. ':' .. (m[3] or '0') .. ' '
  local _, n = string.gsub(h, ' ', ' ')
  while n > 4 do
    h = string.sub(h, string.find(h, ' ', 1, true) + 1)
    n = n - 1
  end
  local e = now()
  if e == epoch then
    e = e .. '1'
  end
  epoch = e
  redis.call('HSET', KEYS[1], 'e', epoch, 'n', node, 'h', h)
end
local off = string.format('%d', redis.call('HINCRBY', KEYS[1], 'o', 1))
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], off .. '-0', 'd', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return redis.call(ARGV[5], ARGV[1], '\0SH1' .. epoch .. '.' .. off .. '\n' .. ARGV[2])
