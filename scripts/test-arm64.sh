#!/usr/bin/env bash
# Cross-compiles the test binaries of the given packages for linux/arm64
# and runs each under qemu-aarch64 in its package directory (so testdata
# paths resolve as under go test). Fails on the first failing package.
# Tests run with -test.short; ARM64_SKIP is a -test.skip pattern, said on
# the output when set.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
command -v qemu-aarch64 >/dev/null 2>&1 || { echo "test-arm64: qemu-aarch64 missing (make deps installs qemu-user)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for pkg in "$@"; do
  name=$(echo "$pkg" | tr '/.' '__')
  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 "$GO" test -c -o "$tmp/$name.test" "$pkg"
  dir=$("$GO" list -f '{{.Dir}}' "$pkg")
  start=$(date +%s)
  skip=()
  if [ -n "${ARM64_SKIP:-}" ]; then
    skip=(-test.skip "$ARM64_SKIP")
    echo "test-arm64: $pkg: not under emulation: $ARM64_SKIP"
  fi
  if ! (cd "$dir" && qemu-aarch64 "$tmp/$name.test" -test.count=1 -test.short "${skip[@]}" > "$tmp/$name.log" 2>&1); then
    grep -E '^(---|\s+\S+_test.go:|FAIL|panic)' "$tmp/$name.log" | head -60 >&2
    echo "FAIL	$pkg (linux/arm64 under qemu)" >&2
    exit 1
  fi
  echo "ok  	$pkg (linux/arm64 under qemu)	$(( $(date +%s) - start ))s"
done
