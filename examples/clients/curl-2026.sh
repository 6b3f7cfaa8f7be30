#!/usr/bin/env bash
# Protocol 2026-07-28 by hand (curl and jq): no handshake, no session. Every POST carries the
# headers MCP-Protocol-Version, Mcp-Method and (tools/call, prompts/get, resources/read, tasks/*)
# Mcp-Name, and every request's params._meta carries the protocol version, the client's info and
# its capabilities. Shown against the demo server: a state handle, a question (input_required),
# and a task. Run it: bash examples/clients/curl-2026.sh http://127.0.0.1:3000/mcp
set -euo pipefail
URL=${1:-http://127.0.0.1:3000/mcp}
CAPS='{"elicitation":{},"extensions":{"io.modelcontextprotocol/tasks":{}}}'

# mcp METHOD NAME PARAMS: one request; prints the JSON-RPC response (the last `data:` line of an SSE answer).
mcp () {
  local method=$1 name=$2 params=$3 body
  body=$(jq -cn --arg m "$method" --argjson p "$params" --argjson caps "$CAPS" '{jsonrpc: "2.0", id: 1, method: $m,
    params: ($p + {_meta: {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                           "io.modelcontextprotocol/clientInfo": {name: "curl", version: "1.0.0"},
                           "io.modelcontextprotocol/clientCapabilities": $caps}})}')
  curl -sS "$URL" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H "Mcp-Method: $method" ${name:+-H "Mcp-Name: $name"} \
    -d "$body" | sed -n 's/^data: //p; /^{/p' | tail -n 1
}

# What the server offers.
mcp server/discover '' '{}' | jq -c '.result.supportedVersions'

# A state handle: minted by one call, named in the arguments of the next (any instance serves it).
BASKET=$(mcp tools/call basket_create '{"name":"basket_create","arguments":{}}' | jq -r '.result.structuredContent.basket')
mcp tools/call basket_add "$(jq -cn --arg b "$BASKET" '{name: "basket_add", arguments: {basket: $b, item: "pear"}}')" | jq -c '.result.structuredContent'

# A question: the first answer is input_required with the question and a sealed requestState;
# the retry carries the answer under the question's key, and the requestState as it came.
ROUND=$(mcp tools/call ask_name '{"name":"ask_name","arguments":{}}')
echo "$ROUND" | jq -c '.result | {resultType, asked: (.inputRequests | keys)}'
KEY=$(echo "$ROUND" | jq -r '.result.inputRequests | keys[0]')
STATE=$(echo "$ROUND" | jq -r '.result.requestState')
mcp tools/call ask_name "$(jq -cn --arg k "$KEY" --arg s "$STATE" \
  '{name: "ask_name", arguments: {}, inputResponses: {($k): {action: "accept", content: {name: "Ada"}}}, requestState: $s}')" \
  | jq -r '.result.content[0].text'

# A task (the client declares the Tasks extension in its capabilities): created at once, polled
# with tasks/get, its question answered with tasks/update, polled until it ends.
TASK=$(mcp tools/call long_job '{"name":"long_job","arguments":{"seconds":2,"ask":true}}' | jq -r '.result.taskId')
until [ "$(mcp tasks/get "$TASK" "{\"taskId\":\"$TASK\"}" | jq -r '.result.status')" = input_required ]; do sleep 0.2; done
mcp tasks/update "$TASK" "{\"taskId\":\"$TASK\",\"inputResponses\":{\"confirm\":{\"action\":\"accept\",\"content\":{\"confirm\":true}}}}" | jq -c '.result.resultType'
until DONE=$(mcp tasks/get "$TASK" "{\"taskId\":\"$TASK\"}") && [ "$(echo "$DONE" | jq -r '.result.status')" = completed ]; do sleep 0.2; done
echo "$DONE" | jq -r '.result.result.content[0].text'
