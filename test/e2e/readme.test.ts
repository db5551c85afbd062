// The README and the guide it leads to (docs/guide.md) are tested documents: their shell blocks run here, the README's
// then the guide's, in order, in one bash, in a fresh directory laid out
// like a clone, beside a master started as the README starts it (npm start), with the Node.js the machine has on
// PATH (not the pinned one), and the suite fails at the first block that fails.
//
// The only substitutions are the ones the README itself names: the master's address and port, the admin password,
// the example node addresses (203.0.113.10 and .11: both nodes are this machine here) and the other masters' ports.
// A block may say what the test does with it in a comment on the line above its fence:
//   <!-- readme-test: skip: <why> -->   not run (a remote node, systemd, the suite itself), with the reason
//   <!-- readme-test: fails -->         run, and must exit non-zero (a refusal shown on purpose)

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { test } from 'node:test';
import { freePort } from '../net.ts';

interface Block {
  line: number;
  text: string;
  marker: { kind: 'skip'; why: string } | { kind: 'fails' } | null;
}

/** The documents whose blocks run, in this order: the guide goes on from the README's session. */
const DOCUMENTS = ['README.md', 'docs/guide.md'];

/** A document's `sh` blocks, with the marker on the line above each, if any. */
function shellBlocks(markdown: string): Block[] {
  const lines = markdown.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const fence = /^(\s*)```sh\s*$/.exec(lines[i]!);
    if (!fence) continue;
    const indent = fence[1]!.length;
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length && lines[j]!.trim() !== '```'; j++) body.push(lines[j]!.slice(indent));
    const above = /<!-- readme-test: (skip: (.+)|fails) -->/.exec(lines[i - 1] ?? '');
    const marker = !above ? null : above[2] ? { kind: 'skip' as const, why: above[2] } : { kind: 'fails' as const };
    blocks.push({ line: i + 1, text: body.join('\n'), marker });
    i = j;
  }
  return blocks;
}

/** What a clone holds that the README's commands use; node_modules and the sources, not dist/ nor data/. */
const CLONE = [
  'package.json',
  'node_modules',
  'build.mjs',
  'tsconfig.json',
  'cmd',
  'internal',
  'web',
  'docs',
  'deploy',
];

const PASSWORD = 'readme-admin-password-1';

/** PATH without the pinned runtime, when the machine has a node of its own: as a new user's shell has it. */
function usersPath(): string {
  const entries = (process.env.PATH ?? '').split(delimiter);
  const without = entries.filter((entry) => !entry.includes(join('node_modules', '.bin')));
  const systemNode = spawnSync('sh', ['-c', 'command -v node'], { env: { PATH: without.join(delimiter) } });
  return (systemNode.status === 0 ? without : entries).join(delimiter);
}

const missing = ['bash', 'curl', 'jq'].filter((tool) => spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0);

test(
  'every shell block of the README and the guide runs as pasted, in order, against a real master and its agents',
  { skip: missing.length > 0 ? `needs ${missing.join(', ')} (.ci/run installs them)` : false, timeout: 240_000 },
  async (t) => {
    const root = resolve('.');
    const dir = mkdtempSync(join(tmpdir(), 'portplane-readme-'));
    for (const name of CLONE) symlinkSync(join(root, name), join(dir, name));
    mkdirSync(join(dir, 'home'));
    const [port, tlsPort, rolloutPort, standbyPort] = [
      await freePort(),
      await freePort(),
      await freePort(),
      await freePort(),
    ];
    const base = `http://127.0.0.1:${port}`;
    const substitute = (text: string) =>
      text
        .replaceAll('http://127.0.0.1:8080', base)
        .replaceAll("'the password printed at first start'", `'${PASSWORD}'`)
        .replaceAll('203.0.113.10', '127.0.0.1')
        .replaceAll('203.0.113.11', '127.0.0.1')
        .replaceAll(':8443', `:${tlsPort}`)
        .replaceAll(':8444', `:${rolloutPort}`)
        .replaceAll(':8445', `:${standbyPort}`);

    const blocks = DOCUMENTS.flatMap((file) =>
      shellBlocks(readFileSync(file, 'utf8')).map((block) => ({ ...block, where: `${file}:${block.line}` })),
    );
    const script = [
      'set -euo pipefail',
      // The README's first block: the master, as npm start runs it (npm install is done: node_modules is linked).
      `MASTER_LISTEN=127.0.0.1:${port} npm start >master.log 2>&1 &`,
    ];
    for (const block of blocks) {
      if (block.marker?.kind === 'skip') {
        t.diagnostic(`${block.where} skipped: ${block.marker.why}`);
        continue;
      }
      script.push(`echo "=== ${block.where}"`);
      const text = substitute(block.text);
      script.push(
        block.marker?.kind === 'fails'
          ? `if (\n${text}\n); then echo "${block.where} was to fail, and did not" >&2; exit 1; fi`
          : text,
      );
    }
    script.push('echo "=== every block ran"');

    const child = spawn('bash', ['--noprofile', '--norc', '-c', script.join('\n')], {
      cwd: dir,
      detached: true,
      env: {
        PATH: usersPath(),
        HOME: join(dir, 'home'),
        LANG: 'C.UTF-8',
        MASTER_ADMIN_PASSWORD: PASSWORD,
        NO_COLOR: '1',
        npm_config_update_notifier: 'false',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    // The blocks leave agents and masters running in the background: the whole process group goes at the end.
    t.after(() => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
      rmSync(dir, { recursive: true, force: true });
    });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    const code = await new Promise<number | null>((done) => child.on('close', done));

    const ran = [...output.matchAll(/^=== ((?:README|docs\/guide)\.md:\d+)$/gm)].map((m) => m[1]);
    const log = () => `${output.slice(-6000)}\n--- master.log:\n${safeRead(join(dir, 'master.log')).slice(-3000)}`;
    assert.equal(code, 0, `the README failed in the block at ${ran.at(-1) ?? 'the start'}:\n${log()}`);
    assert.match(output, /=== every block ran/);
    t.diagnostic(`ran ${ran.length} blocks`);

    // What the blocks left behind is what the README says it is.
    const nodeFile = join(dir, 'edge-1.json');
    assert.equal(statSync(nodeFile).mode & 0o777, 0o600, 'an answer holding an agent token is kept 0600');
    assert.equal(JSON.parse(readFileSync(join(dir, 'export.json'), 'utf8')).rules.length, 500);
    const env = readFileSync(join(dir, 'edge-1.env'), 'utf8');
    assert.doesNotMatch(env, /null/, 'no setting is written as null (an HTTP master has no pin)');
    assert.deepEqual(
      env
        .trim()
        .split('\n')
        .map((line) => line.split('=')[0]),
      ['AGENT_MASTER_URL', 'AGENT_TOKEN'],
    );
    for (const backup of ['master.backup', 'remote.backup']) {
      assert.ok(existsSync(join(dir, backup)), backup);
      assert.equal(statSync(join(dir, backup)).mode & 0o077, 0, `${backup} is readable by its owner alone`);
    }
    assert.match(output, /"applied": 500/, 'the sync reached the agent the README started');
    assert.match(output, /"status": "up"/, 'the tunnel came up between the two agents');
    assert.match(output, /"type": "rule.sync",\n\s*"state": "applied"/, "the event stream told of the rule's sync");
  },
);

function safeRead(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '(none)';
  }
}
