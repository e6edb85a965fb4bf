-- wrk script, one connection per thread: alternate claim and submit.
local key = os.getenv("TESSERA_KEY")
local task, lease = nil, nil
local hdr = {["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json"}
request = function()
  if task then
    local body = '{"lease_id":"' .. lease .. '","ok":true}'
    local path = "/v1/tasks/" .. task .. "/submit"
    task = nil
    return wrk.format("POST", path, hdr, body)
  end
  return wrk.format("POST", "/v1/queues/bench.q/claim", hdr, "{}")
end
response = function(status, headers, body)
  if status == 200 then
    task = string.match(body, '"task_id":"(t%d+)"')
    lease = string.match(body, '"lease":{"id":"(%x+)"')
  end
end
