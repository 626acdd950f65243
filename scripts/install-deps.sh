#!/usr/bin/env bash
# Installs what the test suite needs from Debian when it is missing:
# protoc (the regeneration check) and libonnx-testdata (the ONNX backend
# test models). Idempotent: does nothing when both are present.
set -euo pipefail

need=()
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
[ -d /usr/share/libonnx-testdata/data ] || need+=(libonnx-testdata)
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root or sudo to install: ${need[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
