-- wrk script for bench/intake.py. Configured by environment variables:
--   BENCH_METHOD (GET), BENCH_BODY_FILE (JSON body, sent with Content-Type), BENCH_TOKENS
--   (comma-separated bearer tokens, used in turn: one per simulated client), BENCH_IF_NONE_MATCH, BENCH_EXPECT (the one status counted as ok), BENCH_MAX_REQUESTS
--   (each thread stops after this many responses: the count bound; -d is the time bound).
-- done() prints one JSON line starting with "BENCH_RESULT " for the driver to parse.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  wrk.method = os.getenv("BENCH_METHOD") or "GET"
  local body_file = os.getenv("BENCH_BODY_FILE")
  if body_file and body_file ~= "" then
    local f = assert(io.open(body_file, "rb"))
    wrk.body = f:read("*a")
    f:close()
    wrk.headers["Content-Type"] = "application/json"
  end
  local inm = os.getenv("BENCH_IF_NONE_MATCH")
  if inm and inm ~= "" then
    wrk.headers["If-None-Match"] = inm
  end
  expect = tonumber(os.getenv("BENCH_EXPECT") or "200")
  max_requests = tonumber(os.getenv("BENCH_MAX_REQUESTS") or "0")
  ok, bad, seen, first_bad = 0, 0, 0, 0
  prepared, turn = {}, 0
  for token in string.gmatch(os.getenv("BENCH_TOKENS") or "", "[^,]+") do
    wrk.headers["Authorization"] = "Bearer " .. token
    table.insert(prepared, wrk.format())
  end
  if #prepared == 0 then
    table.insert(prepared, wrk.format())
  end
end

function request()
  turn = turn % #prepared + 1
  return prepared[turn]
end

function response(status, headers, body)
  seen = seen + 1
  if status == expect then
    ok = ok + 1
  else
    bad = bad + 1
    if first_bad == 0 then first_bad = status end
  end
  if max_requests > 0 and seen >= max_requests then
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local ok_total, bad_total, first = 0, 0, 0
  for _, t in ipairs(threads) do
    ok_total = ok_total + t:get("ok")
    bad_total = bad_total + t:get("bad")
    if first == 0 then first = t:get("first_bad") end
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests": %d, "duration_us": %d, "ok": %d, "bad": %d, "first_bad": %d, ' ..
    '"socket_errors": %d, "timeouts": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
    '"max_us": %d, "mean_us": %.1f}\n',
    summary.requests, summary.duration, ok_total, bad_total, first,
    e.connect + e.read + e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
