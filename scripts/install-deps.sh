#!/usr/bin/env bash
# Installs what the test suite needs from Debian when it is missing:
# protoc (the regeneration check), libonnx-testdata (the ONNX backend
# test models) and chromium (the HTML report is rendered headless in
# pkg/compare's tests), and npm when there is none (scripts/fetch-ort.sh
# gets ONNX Runtime from the npm registry), and qemu-user (make test-arm64
# runs the arm64 kernel and engine tests under qemu-aarch64). Idempotent: does nothing when all are present.
set -euo pipefail

need=()
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
[ -d /usr/share/libonnx-testdata/data ] || need+=(libonnx-testdata)
command -v chromium >/dev/null 2>&1 || need+=(chromium chromium-driver)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
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
