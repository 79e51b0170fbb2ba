#!/usr/bin/env bash
# Installs each peer of `loomctx bench perf --peers` into a virtual environment of its own,
# under bench/peers/.venvs/<peer> (never a dependency of Loom; nothing here is imported by it).
#
#   bash bench/peers/setup.sh              # every peer
#   bash bench/peers/setup.sh langchain    # only the named ones
#
# Versions are pinned so that a report names what it measured. The peers' tokenizers run
# offline: the adapters point tiktoken at ../shared/data/tiktoken (see _peer_common.py).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
declare -A specs=(
  [llamaindex]="llama-index-core==0.14.25"
  [langchain]="langchain-core==1.8.1 tiktoken"
  [autogen]="autogen-core==0.7.5 autogen-ext[openai]==0.7.5"
  [loomagent]="loom-agent==0.5.6"
)
peers=("$@")
if [ ${#peers[@]} -eq 0 ]; then peers=(llamaindex langchain autogen loomagent); fi
for peer in "${peers[@]}"; do
  spec="${specs[$peer]:-}"
  if [ -z "$spec" ]; then
    echo "unknown peer '$peer'; choose from: ${!specs[*]}" >&2
    exit 2
  fi
  start=$(date +%s)
  venv="$here/.venvs/$peer"
  "$python" -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $spec
  echo "$peer: $spec installed in $(( $(date +%s) - start )) s ($venv)"
done
