// SPDX-License-Identifier: MIT
// What the Node suites (the official `openai` package against mlxcel-server) share: the pass/fail
// tally (`ok`, then `finish` prints the count and exits 1 on any failure), a watchdog that fails a
// suite that hangs, copies of the demo model made of symlinks, and servers on ephemeral ports:
// started and awaited until their "listening on http://...:PORT" line, handed back with an OpenAI
// client, and stopped with the checks that they exit 0 and wrote no sanitizer report. Servers still
// running and model copies are cleaned up when the process exits.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';

export const root = process.cwd();  // the suites run from the repository root
export const demo = path.join(root, 'models/qwen3-demo-44m-4bit');
export const qwen3TokenizerConfig = path.join(root, 'tests/fixtures/qwen3_tokenizer_config.json');

let failures = 0;
let watchdog = null;
const servers = [];
const dirs = [];
process.on('exit', () => {
  for (const s of servers) if (s.exitCode === null) s.kill('SIGTERM');
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

export function ok(c, what) {
  if (c) console.log(`ok - ${what}`);
  else { failures++; console.log(`FAIL - ${what}`); }
}

// Fails the suite (and so stops its servers) when it runs longer than ms.
export function startWatchdog(ms) {
  watchdog = setTimeout(() => { console.log('FAIL - suite timed out'); process.exit(1); }, ms);
}

export function finish() {
  clearTimeout(watchdog);
  console.log(`${failures} failures`);
  process.exit(failures ? 1 : 0);
}

// A temporary copy of the demo model: symlinks to every file but those in `own` (the caller writes
// them), with tokenizer_config.json copied from `tokenizerConfig` when that is given.
export function demoCopy(prefix, { own = [], tokenizerConfig = null } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(dir);
  const skip = new Set(tokenizerConfig ? [...own, 'tokenizer_config.json'] : own);
  for (const f of fs.readdirSync(demo)) if (!skip.has(f)) fs.symlinkSync(path.join(demo, f), path.join(dir, f));
  if (tokenizerConfig) fs.copyFileSync(tokenizerConfig, path.join(dir, 'tokenizer_config.json'));
  return dir;
}

// Starts `bin args --port 0`; resolves to { server, port, client, log() } once it listens (30 s at
// most). clientOptions go to the OpenAI client (apiKey, timeout).
export async function startServer(bin, args, clientOptions = {}) {
  const server = spawn(bin, [...args, '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
  servers.push(server);
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 30000);
    server.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/[^\s]*:(\d+)\n/);
      if (m) { clearTimeout(t); resolve(Number(m[1])); }
    });
    server.on('exit', (code) => reject(new Error(`server exited (${code}):\n${log}`)));
  });
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'none', timeout: 120000, maxRetries: 0,
                              ...clientOptions });
  return { server, port, client, log: () => log };
}

// SIGTERM, then checks the exit status is 0 and the log holds no sanitizer report.
export async function stopServer({ server, log }, label = '') {
  if (server.exitCode === null) server.kill('SIGTERM');
  const code = await new Promise((resolve) => server.exitCode !== null ? resolve(server.exitCode) : server.on('exit', (c) => resolve(c)));
  ok(code === 0, `${label}server stopped cleanly (exit ${code})`);
  if (/AddressSanitizer|runtime error|LeakSanitizer/.test(log())) ok(false, `${label}sanitizer report:\n${log()}`);
}
