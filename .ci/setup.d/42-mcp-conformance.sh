#!/usr/bin/env bash
# Installs what tests/test_mcp_conformance.py runs, into .ci/cache/ (gitignored):
#  - .ci/cache/mcp-conformance/: the official MCP conformance suite
#    (npm @modelcontextprotocol/conformance 0.2.0-alpha.11) and the Node 22 it needs (npm's
#    node@22 package puts one at node_modules/.bin/node);
#  - .ci/cache/mcp-reference/: the suite's own reference server, vendored unchanged in
#    tests/mcp_servers/reference/ (ORIGIN.md), with its dependencies from its package-lock
#    (npm ci: @modelcontextprotocol/sdk 1.29.0, express 5.2.1, cors 2.8.6, zod 4.3.6,
#    tsx 4.21.0), and the stdio wrapper tests/mcp_servers/reference_stdio.ts beside it.
# Idempotent: nothing is installed when the installed files match the repository's.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
suite=.ci/cache/mcp-conformance
ref=.ci/cache/mcp-reference
src=tests/mcp_servers/reference
if ! command -v npm >/dev/null 2>&1; then
  echo "42-mcp-conformance.sh: npm is required" >&2
  exit 1
fi

want_suite="@modelcontextprotocol/conformance@0.2.0-alpha.11 node@22"
if [ "$(cat "$suite/.installed" 2>/dev/null)" != "$want_suite" ] \
   || [ ! -x "$suite/node_modules/.bin/node" ]; then
  rm -rf "$suite"
  mkdir -p "$suite"
  printf '{"name":"tooltrace-mcp-conformance","private":true}\n' > "$suite/package.json"
  (cd "$suite" && npm install --silent --no-audit --no-fund --no-save $want_suite >/dev/null)
  echo "$want_suite" > "$suite/.installed"
fi

want_ref=$(cat "$src/package-lock.json" "$src/everything-server.ts" \
  tests/mcp_servers/reference_stdio.ts | sha256sum | cut -d' ' -f1)
if [ "$(cat "$ref/.installed" 2>/dev/null)" != "$want_ref" ] \
   || [ ! -f "$ref/node_modules/tsx/dist/cli.mjs" ]; then
  rm -rf "$ref"
  mkdir -p "$ref"
  cp "$src/everything-server.ts" "$src/package.json" "$src/package-lock.json" "$ref/"
  cp tests/mcp_servers/reference_stdio.ts "$ref/"
  (cd "$ref" && npm ci --silent --no-audit --no-fund >/dev/null)
  echo "$want_ref" > "$ref/.installed"
fi
echo "mcp conformance suite: $repo/$suite; reference server: $repo/$ref"
