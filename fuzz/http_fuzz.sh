#!/usr/bin/env bash
# Property-based HTTP fuzz of `spillway serve` against its own /openapi.json (schemathesis).
# Not run in CI: it needs Python, schemathesis from PyPI and a few minutes.
#
#   pip install schemathesis            # once; measured with schemathesis 4.32.5
#   fuzz/http_fuzz.sh                   # not_a_server_error only (the zero-5xx gate)
#   CHECKS=all fuzz/http_fuzz.sh        # every schemathesis check (schema conformance too)
#
# Settings (environment): PROFILE=release|debug (default release), PORT (7979), SEED (1),
# MAX_EXAMPLES per operation (100), CHECKS (not_a_server_error), OUT (a fresh temp directory).
# Exits non-zero when schemathesis reports a failure.
set -euo pipefail

cd "$(dirname "$0")/.."
PROFILE=${PROFILE:-release}
PORT=${PORT:-7979}
SEED=${SEED:-1}
MAX_EXAMPLES=${MAX_EXAMPLES:-100}
CHECKS=${CHECKS:-not_a_server_error}
OUT=${OUT:-$(mktemp -d /tmp/http-fuzz.XXXXXX)}

if [ "$PROFILE" = release ]; then
    cargo build --release -p spillway
else
    cargo build -p spillway
fi
mkdir -p "$OUT"
# Serve from a copy, so that a cargo build running meanwhile cannot replace the binary under the
# server (on a shared machine, tests of other packages may also stop processes named `spillway`).
cp "target/$PROFILE/spillway" "$OUT/server"
"$OUT/server" serve --listen "127.0.0.1:$PORT" --data-dir "$OUT/data" --rate-limit 0 >"$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT

# Wait until the control loop has run a round (/readyz is 200), so readiness is not a 503 finding.
for _ in $(seq 1 100); do
    if curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null; then break; fi
    sleep 0.2
done
TOKEN=$(cat "$OUT/data/admin.token")

# --request-timeout: GET /v1/events is a server-sent event stream that never ends by itself; a
# request that times out is reported as an error, not as a 5xx, so streams are cut after 3 s.
set +e
st run "http://127.0.0.1:$PORT/openapi.json" \
    -H "Authorization: Bearer $TOKEN" \
    --checks "$CHECKS" \
    --seed "$SEED" \
    --max-examples "$MAX_EXAMPLES" \
    --request-timeout 3 \
    --workers 1 \
    --report junit --report-dir "$OUT/report" \
    2>&1 | tee "$OUT/schemathesis.log"
STATUS=${PIPESTATUS[0]}
if ! kill -0 "$SERVER" 2>/dev/null; then
    wait "$SERVER"
    echo "the server exited during the run, status $? (a status above 128 is 128 + the signal number)"
    STATUS=1
fi
set -e
METRICS=$(curl -s -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/metrics" || true)
echo "requests served (the server's own count): $(echo "$METRICS" | awk '/^spillway_http_requests_total/ {s += $NF} END {print s + 0}')"
echo "5xx answers in the server's own metrics:"
echo "$METRICS" | grep -E '^spillway_http_requests_total.*status="5[0-9][0-9]"' || echo "  none"
echo "logs and report in $OUT"
exit "$STATUS"
