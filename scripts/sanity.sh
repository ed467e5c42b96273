#!/usr/bin/env bash
# Run ansible-test sanity on a copy of the collection laid out as
# ansible_collections/mindverse/sglang_pd (ansible-test needs that path).
# Usage: scripts/sanity.sh [ansible-test sanity args...]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$repo/.venv}
# ansible-test fetches a pip bootstrap script from a host that is not reachable here;
# give it the project's stand-in (it caches the script under this name).
pip_version=$(grep -oP "pip='\K[0-9.]+" "$("$venv/bin/python" -c 'import ansible_test,os; print(os.path.dirname(ansible_test.__file__))')/_internal/python_requirements.py" | head -n1)
cache=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
[ -s "$cache" ] || { mkdir -p "$(dirname "$cache")"; cp "$repo/scripts/get_pip_standin.py" "$cache"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/mindverse/sglang_pd
mkdir -p "$dest"
cd "$repo"
# Tracked files plus new files that git does not ignore.
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
  | tar --null -cf - -T - | tar -xf - -C "$dest"
cd "$dest"
git init -q . && git add -A >/dev/null
export PATH=$venv/bin:$PATH
ansible-test sanity --python 3.11 --local --color no "$@"
