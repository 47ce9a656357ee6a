-- shardsub: read history. KEYS[1] meta hash, KEYS[2] stream.
-- ARGV: 1 'since' or 'last', 2 offset (since: exclusive), 3 count,
-- 4 the offset's epoch (since)
local m = redis.call('HMGET', KEYS[1], 'e', 'o', 'h')
local epoch = m[1]
if not epoch then
  return {'', '0', {}, ''}
end
local h = m[3] or ''
local got
if ARGV[1] == 'since' then
  local from = ARGV[2]
  if ARGV[4] ~= epoch then
    -- An earlier epoch of this stream: read on from where it ended here.
    local e = string.match(' ' .. h, ' ' .. ARGV[4] .. ':(%d+) ')
    if e and tonumber(e) < tonumber(from) then
      from = e
    end
  end
  got = redis.call('XRANGE', KEYS[2], '(' .. from .. '-0', '+', 'COUNT', ARGV[3])
else
  got = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', ARGV[3])
end
return {epoch, m[2] or '0', got, h}
