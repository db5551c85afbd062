import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../../internal/runtime/cli.ts', import.meta.url));
const LOG = fileURLToPath(new URL('../../internal/log/log.ts', import.meta.url));

test('a rejection nobody awaited is logged, and the program goes on until it is stopped', async (t) => {
  const script = `
    import { run } from ${JSON.stringify(CLI)};
    import { streamLogger } from ${JSON.stringify(LOG)};
    await run({
      name: 'probe', version: '0', usage: '', log: streamLogger(process.stdout), parsed: { config: {} },
      async start() {
        Promise.reject(new Error('nobody listens'));
        // Running, as a program with a server is, until it is stopped.
        const running = setInterval(() => undefined, 1000);
        setTimeout(() => process.stdout.write('still here\\n'), 100);
        return async () => clearInterval(running);
      },
    });`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => child.kill('SIGKILL'));
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
    if (output.includes('still here')) child.kill('SIGTERM');
  });
  const [code] = await once(child, 'exit');
  assert.equal(code, 0, output);
  const logged = output
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line));
  const line = logged.find((entry) => entry.msg === 'unhandled rejection');
  assert.match(line?.error ?? '', /nobody listens/);
});
