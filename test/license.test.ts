import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { generateLicenseKeys, issueLicense, type LicenseFields } from '../internal/license/license.ts';
import { call, mintToken, startMaster } from './helpers.ts';
import { openEvents } from './sse.ts';

const keys = generateLicenseKeys();
const keyDir = mkdtempSync(join(tmpdir(), 'portplane-license-'));
const publicKeyPath = join(keyDir, 'public.pem');
writeFileSync(publicKeyPath, keys.publicKeyPem);

const fields: LicenseFields = {
  license_id: 'lic-1',
  edition: 'pro',
  licensee: 'Example Hosting Ltd',
  limits: { max_nodes: 250 },
  issued_at: '2026-01-01T00:00:00Z',
  expires_at: '2099-01-01T00:00:00Z',
};

async function licenseWith(t: Parameters<typeof startMaster>[0], text: string | null) {
  const m = await startMaster(t, {
    licenseKeyPath: publicKeyPath,
    prepare: (dir) => text !== null && writeFileSync(join(dir, 'license.json'), text),
  });
  const token = await mintToken(m, ['license:read']);
  return (await call(m.url, 'GET', '/api/license', { token })).body;
}

test('with no license the master runs as the free edition', async (t) => {
  const view = await licenseWith(t, null);
  assert.deepEqual(view, {
    status: 'none',
    valid: false,
    problem: null,
    edition: 'free',
    licensee: null,
    license_id: null,
    limits: { max_nodes: 5 },
    issued_at: null,
    expires_at: null,
  });
});

test('a license signed with the configured key is shown with its limits', async (t) => {
  const view = await licenseWith(t, issueLicense(fields, keys.privateKeyPem));
  assert.deepEqual(view, { status: 'valid', valid: true, problem: null, ...fields });
});

test('tampered, foreign, expired and garbage licenses are reported and fall back to free limits', async (t) => {
  const signed = JSON.parse(issueLicense(fields, keys.privateKeyPem));
  const other = generateLicenseKeys();
  const cases = [
    {
      name: 'raised limit',
      text: JSON.stringify({ ...signed, limits: { max_nodes: null } }),
      status: 'invalid',
      problem: /signature/,
    },
    { name: 'other key', text: issueLicense(fields, other.privateKeyPem), status: 'invalid', problem: /signature/ },
    {
      name: 'expired',
      text: issueLicense({ ...fields, expires_at: '2020-01-01T00:00:00Z' }, keys.privateKeyPem),
      status: 'expired',
      problem: /expired/,
    },
    { name: 'not JSON', text: 'hello', status: 'invalid', problem: /JSON/ },
    { name: 'wrong shape', text: '{"signature": 1}', status: 'invalid', problem: /fields/ },
  ];
  for (const c of cases) {
    const view = await licenseWith(t, c.text);
    assert.equal(view.status, c.status, c.name);
    assert.equal(view.valid, false, c.name);
    assert.match(view.problem, c.problem, c.name);
    assert.deepEqual(view.limits, { max_nodes: 5 }, c.name);
  }
});

test('the license tool makes a key pair and issues a license the master accepts', async (t) => {
  // Directories that do not exist yet: the tool makes them.
  const dir = join(mkdtempSync(join(tmpdir(), 'portplane-license-tool-')), 'keys');
  const tool = (...args: string[]) =>
    execFileSync(process.execPath, ['--import', 'tsx', 'cmd/license/main.ts', ...args], {
      encoding: 'utf8',
      stdio: 'pipe',
    });
  tool('keygen', dir);
  const firstKey = readFileSync(join(dir, 'license-private.pem'), 'utf8');
  assert.throws(() => tool('keygen', dir), /exists already/, 'a key pair is never overwritten');
  assert.equal(readFileSync(join(dir, 'license-private.pem'), 'utf8'), firstKey);
  const out = join(dir, '..', 'data', 'license.json');
  const said = tool(
    'issue',
    '--key',
    join(dir, 'license-private.pem'),
    '--licensee',
    'Tool Test',
    '--max-nodes',
    '3',
    '--expires',
    '2099-06-01T00:00:00Z',
    '--out',
    out,
  );
  const written = JSON.parse(readFileSync(out, 'utf8'));
  assert.equal(
    said,
    `wrote ${out}: license ${written.license_id}, pro edition for Tool Test, 3 nodes, expires 2099-06-01T00:00:00Z; ` +
      'install it as DATA_DIR/license.json and start the master with --license-key PUBLIC.pem\n',
  );
  const m = await startMaster(t, {
    licenseKeyPath: join(dir, 'license-public.pem'),
    prepare: (d) => writeFileSync(join(d, 'license.json'), readFileSync(out)),
  });
  const view = (await call(m.url, 'GET', '/api/license', { token: m.admin })).body;
  assert.equal(view.status, 'valid');
  assert.equal(view.licensee, 'Tool Test');
  assert.deepEqual(view.limits, { max_nodes: 3 });
  assert.equal(view.expires_at, '2099-06-01T00:00:00Z');
});

test('a license for another key is invalid under the built-in vendor key', async (t) => {
  const m = await startMaster(t, {
    prepare: (d) => writeFileSync(join(d, 'license.json'), issueLicense(fields, keys.privateKeyPem)),
  });
  const view = (await call(m.url, 'GET', '/api/license', { token: m.admin })).body;
  assert.equal(view.status, 'invalid');
});

test('a license that expires while the master runs is told to event streams that may read it', async (t) => {
  const expiresAt = new Date(Date.now() + 3_600_000).toISOString().replace(/\.\d+Z$/, 'Z');
  const m = await startMaster(t, {
    licenseKeyPath: publicKeyPath,
    prepare: (dir) =>
      writeFileSync(join(dir, 'license.json'), issueLicense({ ...fields, expires_at: expiresAt }, keys.privateKeyPem)),
  });
  const reader = await openEvents(m.url, await mintToken(m, ['license:read']), '?types=license');
  const blind = await openEvents(m.url, await mintToken(m, ['rules:read']));
  t.after(() => (reader.close(), blind.close()));
  await Promise.all([reader.next((e) => e.event === 'ready'), blind.next((e) => e.event === 'ready')]);
  m.advance(2 * 3_600_000);
  const changed = await reader.next((e) => e.event === 'license.changed', 3000);
  assert.deepEqual(changed.data.detail, { before: 'valid', after: 'expired' });
  assert.equal(changed.data.data.status, 'expired');
  assert.deepEqual(
    blind.events.map((e) => e.event),
    ['ready'],
  );
});
