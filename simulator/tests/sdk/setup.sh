#!/usr/bin/env bash
# Makes the Python virtual environment the Azure SDK suite (simulator/tests/azure_sdk.rs) runs in:
# target/azure-sdk-venv with the pinned packages of requirements.txt, from PyPI. Idempotent: an
# environment that already has them is kept. Installs Debian's python3-venv when venv is missing.
set -euo pipefail
cd "$(dirname "$0")/../../.."
venv="${CARGO_TARGET_DIR:-target}/azure-sdk-venv"
req=simulator/tests/sdk/requirements.txt
if ! command -v python3 >/dev/null; then
  echo "azure sdk suite: no python3 on this machine; the suite will skip" >&2
  exit 0
fi
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  apt-get update && apt-get install -y python3-venv
fi
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$venv/requirements.txt"; then
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
cp "$req" "$venv/requirements.txt"
echo "azure sdk suite: $venv ready"
