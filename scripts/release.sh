#!/usr/bin/env bash
# Builds the release binaries into DIR (default dist/): static (no cgo),
# reproducible (-trimpath, no build ID, no VCS stamp but the commit given
# explicitly), stamped with the version and commit, for every platform in
# PLATFORMS, plus a SHA256SUMS file. The same commit and Go version give
# the same bytes on any machine: `scripts/release.sh --check` builds twice
# and compares.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PLATFORMS=${PLATFORMS:-"linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64"}

if [ "${1:-}" = "--check" ]; then
  a=$(mktemp -d) b=$(mktemp -d)
  trap 'rm -rf "$a" "$b"' EXIT
  "$0" "$a" >/dev/null
  "$0" "$b" >/dev/null
  if ! cmp -s "$a/SHA256SUMS" "$b/SHA256SUMS"; then
    echo "release: two builds of the same tree differ:" >&2
    diff "$a/SHA256SUMS" "$b/SHA256SUMS" >&2 || true
    exit 1
  fi
  echo "release: two builds are identical:"
  cat "$a/SHA256SUMS"
  exit 0
fi

out=${1:-dist}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
pkg=github.com/coreaiq/coreaiq/internal/cli
rm -rf "$out"
mkdir -p "$out"
for p in $PLATFORMS; do
  os=${p%/*} arch=${p#*/} ext=""
  [ "$os" = windows ] && ext=.exe
  bin="$out/coreaiq-$version-$os-$arch$ext"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -buildvcs=false \
    -ldflags "-s -w -buildid= -X $pkg.Version=$version -X $pkg.Commit=$commit" -o "$bin" ./cmd/coreaiq
  # Linux binaries must be static; macOS ones always link the system
  # library (the only supported way to call the kernel there), Windows ones
  # have no loader dependency beyond the system DLLs.
  if [ "$os" = linux ]; then
    scripts/check-static.sh "$bin"
  fi
  echo "release: $bin"
done
(cd "$out" && sha256sum coreaiq-* > SHA256SUMS)
echo "release: $out/SHA256SUMS"
