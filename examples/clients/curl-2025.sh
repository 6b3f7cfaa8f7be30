#!/usr/bin/env bash
# Protocol 2025-11-25 by hand (curl and jq): initialize, then send back the Mcp-Session-Id it
# returns and MCP-Protocol-Version on every request. A question from the server arrives on the
# call's SSE stream as an `elicitation/create` request; the answer is a POST of a JSON-RPC
# response with that request's id. Run it: bash examples/clients/curl-2025.sh http://127.0.0.1:3000/mcp
set -euo pipefail
URL=${1:-http://127.0.0.1:3000/mcp}
H=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')

# initialize: the session id comes back as a header.
SID=$(curl -sS -D - -o /dev/null "$URL" "${H[@]}" -d '{"jsonrpc":"2.0","id":1,"method":"initialize",
  "params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"curl","version":"1.0.0"}}}' \
  | tr -d '\r' | sed -n 's/^mcp-session-id: //Ip')
S=("${H[@]}" -H "Mcp-Session-Id: $SID" -H 'MCP-Protocol-Version: 2025-11-25')
curl -sS "$URL" "${S[@]}" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'

# call ID NAME ARGS: a tools/call; prints its JSON-RPC response.
call () {
  curl -sS "$URL" "${S[@]}" -d "{\"jsonrpc\":\"2.0\",\"id\":$1,\"method\":\"tools/call\",\"params\":{\"name\":\"$2\",\"arguments\":$3}}" \
    | sed -n 's/^data: //p; /^{/p' | tail -n 1
}
call 2 counter_add '{"by":2}' | jq -c '.result.structuredContent'
BASKET=$(call 3 basket_create '{}' | jq -r '.result.structuredContent.basket')
call 4 basket_add "{\"basket\":\"$BASKET\",\"item\":\"pear\"}" | jq -c '.result.structuredContent'

# A question: read the call's stream in the background, answer the request it carries.
STREAM=$(mktemp)
curl -sSN "$URL" "${S[@]}" -d '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"ask_name","arguments":{}}}' > "$STREAM" &
until grep -q 'elicitation/create' "$STREAM"; do sleep 0.1; done
ASK_ID=$(sed -n 's/^data: //p' "$STREAM" | jq -r 'select(.method == "elicitation/create") | .id')
curl -sS "$URL" "${S[@]}" -d "$(jq -cn --arg id "$ASK_ID" '{jsonrpc: "2.0", id: $id, result: {action: "accept", content: {name: "Ada"}}}')"
wait
sed -n 's/^data: //p' "$STREAM" | jq -r 'select(.id == 5) | .result.content[0].text'
rm -f "$STREAM"

# End the session.
curl -sS -o /dev/null -w '%{http_code}\n' -X DELETE "$URL" -H "Mcp-Session-Id: $SID" -H 'MCP-Protocol-Version: 2025-11-25'
