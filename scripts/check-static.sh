#!/usr/bin/env bash
# Fails when the given binary (default bin/coreaiq) is dynamically linked on
# Linux: the default build must stay one static file. A dynamically linked
# ELF has a PT_INTERP program header naming the loader; a static one has none.
# Other systems link every binary against the system library (macOS), so
# there is nothing to check there and the script says so.
set -euo pipefail
bin="${1:-bin/coreaiq}"
[ -f "$bin" ] || { echo "check-static: $bin does not exist (run make build)" >&2; exit 1; }
if [ "$(uname -s)" != Linux ]; then
  echo "check-static: not checked on $(uname -s): binaries there always link the system library" >&2
  exit 0
fi
if command -v readelf >/dev/null 2>&1; then
  headers=$(readelf -lW "$bin")
  if grep -q 'INTERP' <<<"$headers"; then
    echo "check-static: $bin is dynamically linked:" >&2
    grep -A1 'INTERP' <<<"$headers" >&2
    exit 1
  fi
elif command -v file >/dev/null 2>&1; then
  if ! file -L "$bin" | grep -q 'statically linked'; then
    echo "check-static: $bin is not statically linked: $(file -L "$bin")" >&2
    exit 1
  fi
else
  echo "check-static: need readelf or file to inspect $bin" >&2
  exit 1
fi
