#!/usr/bin/env bash
# Installs the official MCP conformance suite (npm @modelcontextprotocol/conformance 0.1.16),
# the Node 22 it needs (npm's node@22 package) and the reference upstream
# @modelcontextprotocol/server-everything into .ci/cache/mcp-conformance/ (gitignored), for
# tests/test_mcp_conformance.py. Idempotent: nothing is installed when they are there.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=.ci/cache/mcp-conformance
if [ -x "$dir/node_modules/.bin/node" ] && [ -f "$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js" ] \
   && [ -x "$dir/node_modules/.bin/mcp-server-everything" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "42-mcp-conformance.sh: npm is required" >&2
  exit 1
fi
mkdir -p "$dir"
cd "$dir"
if [ ! -f package.json ]; then
  printf '{"name":"tooltrace-mcp-conformance","private":true}\n' > package.json
fi
npm install --silent --no-audit --no-fund --no-save \
  @modelcontextprotocol/conformance@0.1.16 node@22 @modelcontextprotocol/server-everything >/dev/null
echo "mcp conformance suite: $PWD/node_modules/@modelcontextprotocol/conformance"
