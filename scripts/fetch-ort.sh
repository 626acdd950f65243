#!/usr/bin/env bash
# Fetches the ONNX Runtime shared library that the `ort` engine loads, and
# prints its path on stdout.
#
# The library comes from the npm package onnxruntime-node (the npm registry is
# the one place that ships official ONNX Runtime builds through an ordinary
# package client). Only the shared library is extracted; the package's install
# script is never run. The file is checked against the sha256 recorded below
# and cached in
#
#   ${COREAIQ_ORT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/coreaiq/ort}/<version>/
#
# which is where pkg/runtime/ort looks when ONNXRUNTIME_LIB is unset.
# Idempotent: when the cached file is present and its checksum matches, no
# network is used.
set -euo pipefail

ORT_VERSION=1.23.2

case "$(uname -s)/$(uname -m)" in
  Linux/x86_64)  member=package/bin/napi-v6/linux/x64/libonnxruntime.so.1
                 sha=733854c3d7ce45256cc1c22cd4a30373247e1f7b7de8f40beab24211ef8e2a76 ;;
  Linux/aarch64|Linux/arm64)
                 member=package/bin/napi-v6/linux/arm64/libonnxruntime.so.1
                 sha=648ffa64fbe027ae27139109410900cf776a030dec2dbbac51053318cc44c286 ;;
  Darwin/arm64)  member=package/bin/napi-v6/darwin/arm64/libonnxruntime.$ORT_VERSION.dylib
                 sha=7d5ac8528f16a5d157c53eadb4c766bc23f0dbf02c994fb900303e27806e372c ;;
  Darwin/x86_64) member=package/bin/napi-v6/darwin/x64/libonnxruntime.$ORT_VERSION.dylib
                 sha=0576e3f8dd16833c291fddd037444672ae20cdc6797db00928cc7527541c5a4a ;;
  *) echo "fetch-ort: no ONNX Runtime $ORT_VERSION build for $(uname -s)/$(uname -m) in onnxruntime-node" >&2
     exit 1 ;;
esac

dir="${COREAIQ_ORT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/coreaiq/ort}/$ORT_VERSION"
lib="$dir/$(basename "$member")"

sha256() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
  else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

if [ -f "$lib" ] && [ "$(sha256 "$lib")" = "$sha" ]; then
  echo "$lib"
  exit 0
fi

command -v npm >/dev/null 2>&1 || { echo "fetch-ort: npm is needed to download onnxruntime-node@$ORT_VERSION" >&2; exit 1; }
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "fetch-ort: downloading onnxruntime-node@$ORT_VERSION" >&2
# --ignore-scripts: pack never runs scripts, but say so for the reader.
(cd "$tmp" && npm pack --silent --ignore-scripts "onnxruntime-node@$ORT_VERSION" >/dev/null)
tgz="$tmp/onnxruntime-node-$ORT_VERSION.tgz"
[ -f "$tgz" ] || { echo "fetch-ort: npm pack did not produce $tgz" >&2; exit 1; }
tar -xzf "$tgz" -C "$tmp" "$member"

got=$(sha256 "$tmp/$member")
if [ "$got" != "$sha" ]; then
  echo "fetch-ort: checksum mismatch for $member: got $got, want $sha" >&2
  exit 1
fi
chmod 0644 "$tmp/$member"
mv -f "$tmp/$member" "$lib"
echo "$lib"
