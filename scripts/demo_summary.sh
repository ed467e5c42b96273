#!/usr/bin/env bash
# Print the router URL and a chat completion through it (the end of `make demo`).
source "$(dirname "$0")/setup/lib.sh"
router=$(ansible-inventory -i "$REPO/inventories/local" --list \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); h=d["sglang_router"]["hosts"][0]; print(d["_meta"]["hostvars"][h]["sglang_pd_service_address"])')
url="http://$router:30000"
# The key stays in its file: the command shows where it is read from, not the key.
cmd="curl -s $url/v1/chat/completions -H \"Authorization: Bearer \$(cat $CACHE/router-api-key)\" -H 'Content-Type: application/json' -d '{\"model\": \"glm-5.2-fp8\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello from the demo\"}], \"max_tokens\": 8}'"
echo
echo "Router: $url"
echo "Try:    $cmd"
echo
eval "$cmd"
echo
