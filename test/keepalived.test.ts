// The keepalived example (deploy/keepalived.conf): a configuration Debian's keepalived accepts, and a check
// (deploy/portplane-leads.sh) that passes on the primary alone, run against real masters.

import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { call, mintToken, startMaster } from './helpers.ts';
import { until } from './net.ts';

const has = (tool: string) => spawnSync('sh', ['-c', `command -v ${tool}`]).status === 0;
const noKeepalived = has('keepalived') ? false : 'keepalived is not installed (Debian: apt-get install keepalived)';
const noTools = ['curl', 'jq'].find((tool) => !has(tool));

/**
 * keepalived's own check of `text` (the machine's first interface in place of eth0, the check script where it is):
 * what it says on stderr. Debian's 2.2.7 ends `-t` by a SIGTERM to itself once a script_user is checked, whatever it
 * found, so what it says is the verdict: nothing for a configuration it accepts.
 */
function keepalivedSays(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-keepalived-'));
  try {
    chmodSync(dir, 0o755);
    copyFileSync('deploy/portplane-leads.sh', join(dir, 'portplane-leads.sh'));
    const nic = Object.keys(networkInterfaces()).find((name) => name !== 'lo') ?? 'eth0';
    const config = text
      .replace('/usr/local/lib/portplane/portplane-leads.sh', join(dir, 'portplane-leads.sh'))
      .replace('interface eth0', `interface ${nic}`);
    writeFileSync(join(dir, 'keepalived.conf'), config);
    const checked = spawnSync('keepalived', ['-t', '-f', join(dir, 'keepalived.conf')], { encoding: 'utf8' });
    assert.ok(checked.status === 0 || checked.signal === 'SIGTERM', `keepalived -t: ${checked.status}`);
    return checked.stderr;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test(
  'keepalived accepts the example configuration, and says what is wrong with a broken one',
  { skip: noKeepalived },
  () => {
    const example = readFileSync('deploy/keepalived.conf', 'utf8');
    assert.equal(keepalivedSays(example), '');
    assert.match(keepalivedSays(example.replace('virtual_router_id 51', 'virtual_router_id 999')), /outside range/);
    assert.match(keepalivedSays(example.replace('advert_int 1', 'advert_intt 1')), /Unknown keyword 'advert_intt'/);
  },
);

test(
  "the address's check passes on the primary, and fails on a standby and where none answers",
  { skip: noTools ? `${noTools} is not installed` : false },
  async (t) => {
    // Run beside the masters, which serve from this process.
    const leads = (url: string) =>
      new Promise<number>((resolve) =>
        execFile('sh', ['deploy/portplane-leads.sh', url], (error) => resolve(error ? Number(error.code) : 0)),
      );
    const primary = await startMaster(t);
    const standby = await startMaster(t, {
      follow: { url: primary.url, token: await mintToken(primary, ['replication'], 'standby') },
    });
    await until(
      'the standby serving',
      async () => (await call(standby.url, 'GET', '/api/health')).body.role === 'standby',
    );
    assert.equal(await leads(primary.url), 0);
    assert.notEqual(await leads(standby.url), 0);
    await primary.close();
    assert.notEqual(await leads(primary.url), 0);
  },
);
