#!/usr/bin/env bash
# Makes the Python virtual environment the Azure SDK suite (simulator/tests/azure_sdk.rs) runs in:
# target/azure-sdk-venv with the pinned packages of requirements.txt, from PyPI. Idempotent: an
# environment that already has them is kept. On a machine whose Python cannot make a venv (Debian's
# python3 without python3-venv) or has no Python at all, it installs Debian's python3 and
# python3-venv with apt first.
set -euo pipefail
cd "$(dirname "$0")/../../.."
venv="${CARGO_TARGET_DIR:-target}/azure-sdk-venv"
req=simulator/tests/sdk/requirements.txt

# The first interpreter that can make a venv with pip in it: the one on PATH (pyenv's, say), then
# Debian's.
can_venv() { [ -n "$1" ] && "$1" -c 'import venv, ensurepip' 2>/dev/null; }
python=""
for p in "$(command -v python3 || true)" /usr/bin/python3; do
  if can_venv "$p"; then python="$p"; break; fi
done
if [ -z "$python" ]; then
  echo "azure sdk suite: no Python that can make a venv; installing python3 and python3-venv (apt)" >&2
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3 python3-venv
  python=/usr/bin/python3
  can_venv "$python" || { echo "azure sdk suite: $python still cannot make a venv" >&2; exit 1; }
fi

if [ -x "$venv/bin/python" ] && cmp -s "$req" "$venv/requirements.txt"; then
  exit 0
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
cp "$req" "$venv/requirements.txt"
echo "azure sdk suite: $venv ready ($("$venv/bin/python" --version))"
