#!/usr/bin/env bash
# Generates the JSON Schema of a Grafana 11.6 dashboard from the npm package @grafana/schema, so
# tests can validate the committed dashboards/*.json strictly. Idempotent: the schema is cached
# under .ci/cache/grafana-schema/ and regenerated only when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=.ci/cache/grafana-schema
out="$dir/dashboard.schema.json"
if [ -s "$out" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "40-grafana-schema.sh: npm is required (Node.js 18 or 20 with npm)" >&2
  exit 1
fi
mkdir -p "$dir"
cd "$dir"
if [ ! -f package.json ]; then
  printf '{"name":"tooltrace-grafana-schema","private":true}\n' > package.json
fi
if [ ! -d node_modules/@grafana/schema ] || [ ! -x node_modules/.bin/ts-json-schema-generator ]; then
  npm install --silent --no-audit --no-fund --no-save \
    @grafana/schema@11.6.9 ts-json-schema-generator@2.4.0 >/dev/null
fi
./node_modules/.bin/ts-json-schema-generator \
  --path node_modules/@grafana/schema/dist/esm/raw/dashboard/x/dashboard_types.gen.d.ts \
  --type Dashboard --no-type-check -o dashboard.schema.json.tmp
mv dashboard.schema.json.tmp dashboard.schema.json
echo "grafana dashboard schema: $PWD/dashboard.schema.json"
