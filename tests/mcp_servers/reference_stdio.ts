// The conformance suite's reference server (everything-server.ts, unchanged) as a stdio MCP
// server: each JSON-RPC line read from stdin is POSTed to the reference server, started in
// this process on a loopback port of its own, and every message of the answer (JSON, a
// newline-delimited JSON stream, or SSE) is written to stdout as one line. Both revisions work
// as they do over HTTP: the 2025-11-25 session (its id and revision kept here, server requests
// and notifications read from the session's GET stream) and 2026-07-28 stateless requests
// (the MCP-Protocol-Version header taken from the request's _meta). A notifications/cancelled
// naming a request still streaming (a subscriptions/listen) ends that request's HTTP exchange.
// Run with tsx beside everything-server.ts (.ci/setup.d/42-mcp-conformance.sh puts it there).
import { createServer } from 'node:net';
import { createInterface } from 'node:readline';

// stdout carries JSON-RPC only: the server's own log lines go to stderr.
console.log = (...args: unknown[]) => console.error(...args);

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

const port = await freePort();
process.env.PORT = String(port);
await import('./everything-server.ts');
const url = `http://127.0.0.1:${port}/mcp`;

let sessionId: string | undefined;
let sessionVersion: string | undefined;
let initializeId: unknown;
const open = new Map<string, AbortController>();

function write(msg: any): void {
  if (initializeId !== undefined && msg?.id === initializeId && msg?.result?.protocolVersion) {
    sessionVersion = msg.result.protocolVersion;
  }
  process.stdout.write(JSON.stringify(msg) + '\n');
}

async function ready(): Promise<void> {
  for (let i = 0; i < 200; i++) {
    try {
      await fetch(url, { method: 'GET' });
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 25));
    }
  }
  throw new Error('the reference server did not listen');
}

// Each message of a response body, as it arrives.
async function relay(res: Response): Promise<void> {
  const type = res.headers.get('content-type') ?? '';
  if (!res.body) return;
  const decoder = new TextDecoder();
  let buf = '';
  const sse = type.includes('text/event-stream');
  for await (const chunk of res.body) {
    buf += decoder.decode(chunk as Uint8Array, { stream: true });
    const sep = sse ? '\n\n' : '\n';
    let at: number;
    while ((at = buf.indexOf(sep)) >= 0) {
      const part = buf.slice(0, at);
      buf = buf.slice(at + sep.length);
      emit(part, sse);
    }
  }
  if (buf.trim()) emit(buf, sse);
}

function emit(part: string, sse: boolean): void {
  const text = sse
    ? part.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n')
    : part;
  if (!text.trim()) return;
  try {
    const msg = JSON.parse(text);
    for (const m of Array.isArray(msg) ? msg : [msg]) write(m);
  } catch {
    console.error('reference_stdio: not JSON:', text.slice(0, 200));
  }
}

async function listenSession(): Promise<void> {
  const res = await fetch(url, {
    method: 'GET',
    headers: {
      accept: 'text/event-stream',
      'mcp-session-id': sessionId!,
      'mcp-protocol-version': sessionVersion!
    }
  });
  if (res.ok) await relay(res);
}

// Messages after an initialize wait for its answer (they need the session id it brings).
let initialized: Promise<void> = Promise.resolve();

async function forward(msg: any): Promise<void> {
  if (msg?.method !== 'initialize') await initialized;
  const meta = msg?.params?._meta;
  const version = meta?.['io.modelcontextprotocol/protocolVersion'] ?? sessionVersion;
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream'
  };
  if (version) headers['mcp-protocol-version'] = String(version);
  const stateless = meta?.['io.modelcontextprotocol/protocolVersion'] !== undefined;
  if (sessionId && !stateless) headers['mcp-session-id'] = sessionId;
  if (msg?.method === 'notifications/cancelled') {
    open.get(String(msg.params?.requestId))?.abort();
  }
  if (msg?.method === 'initialize') initializeId = msg.id;
  const abort = new AbortController();
  const key = msg?.method && msg.id !== undefined ? String(msg.id) : undefined;
  if (key !== undefined) open.set(key, abort);
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers,
      body: JSON.stringify(msg),
      signal: abort.signal
    });
    if (msg?.method === 'initialize') {
      sessionId = res.headers.get('mcp-session-id') ?? undefined;
    }
    if (msg?.method === 'notifications/initialized' && sessionId) void listenSession();
    // A notification or a response gets no answer (202); an error about one has no id to
    // answer to.
    if (res.status === 202 || (msg?.id === undefined && !res.ok)) return;
    if (msg?.method === undefined) return;
    await relay(res);
  } catch (e: any) {
    if (e?.name !== 'AbortError') {
      console.error('reference_stdio:', e?.message ?? e);
      if (key !== undefined) {
        write({ jsonrpc: '2.0', id: msg.id, error: { code: -32603, message: 'bridge error' } });
      }
    }
  } finally {
    if (key !== undefined) open.delete(key);
  }
}

await ready();
const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  if (!line.trim()) return;
  let msg: unknown;
  try {
    msg = JSON.parse(line);
  } catch {
    write({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
    return;
  }
  const sent = forward(msg);
  if ((msg as any)?.method === 'initialize') initialized = sent;
});
lines.on('close', () => process.exit(0));
