// Signed agent bundles: the release tool's key pair, signature and check as an operator runs them, and a master that
// keeps only bundles a release key it was given has signed, for exactly their bytes.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { createPublicKey } from 'node:crypto';
import { keyIdOf, releaseKeyText, signBundle } from '../../internal/release/signature.ts';
import { MAX_BUNDLES } from '../../internal/service/bundles.ts';
import { agentInProcess } from '../agents.ts';
import { assertProblem, call, mintToken, node, startMaster } from '../helpers.ts';
import { until } from '../net.ts';
import { VERSION } from '../../internal/version.ts';
import { built } from '../dist.ts';

/** The release tool, as `npm run release -- ARGS` runs it. */
function release(...args: string[]) {
  return spawnSync(process.execPath, ['--import', 'tsx', 'cmd/release/main.ts', ...args], { encoding: 'utf8' });
}

/** A release key pair and an agent bundle signed with it as `version`, in a directory of their own. */
function signed(version: string) {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-release-'));
  assert.equal(release('keygen', dir).status, 0);
  const bundle = join(dir, 'agent.mjs');
  writeFileSync(bundle, `// an agent ${version}\nconsole.log('agent ${version}');\n`);
  const signing = release('sign', '--key', join(dir, 'release-private.pem'), '--version', version, bundle);
  assert.equal(signing.status, 0, signing.stderr);
  return {
    dir,
    publicKey: join(dir, 'release-public.pem'),
    bundle: readFileSync(bundle),
    signature: JSON.parse(readFileSync(`${bundle}.sig`, 'utf8')),
    file: bundle,
  };
}

test('the release tool makes a key pair (private 0600, never over one), signs a bundle, and checks it', () => {
  const made = signed('1.2.3');
  assert.equal(statSync(join(made.dir, 'release-private.pem')).mode & 0o777, 0o600);
  const again = release('keygen', made.dir);
  assert.equal(again.status, 2);
  assert.match(again.stderr, /exists already; move it away/);
  assert.deepEqual(Object.keys(made.signature), ['format', 'version', 'sha256', 'size', 'key', 'signature']);
  const checked = release('verify', '--key', made.publicKey, made.file);
  assert.equal(checked.status, 0, checked.stderr);
  assert.match(checked.stdout, /is version 1\.2\.3, signed by sha256\//);

  writeFileSync(made.file, Buffer.concat([made.bundle, Buffer.from('\n// one byte more')]));
  const tampered = release('verify', '--key', made.publicKey, made.file);
  assert.equal(tampered.status, 1);
  assert.match(tampered.stderr, /is refused: the bundle is not the one signed/);
  const other = signed('1.2.3');
  writeFileSync(made.file, made.bundle);
  const stranger = release('verify', '--key', other.publicKey, made.file);
  assert.equal(stranger.status, 1);
  assert.match(stranger.stderr, /not a release key trusted here/);
  assert.match(
    release('sign', '--key', join(made.dir, 'release-private.pem'), '--version', 'v2', made.file).stderr,
    /not a version/,
  );
});

test('a master keeps a bundle only if a release key it was given signed exactly these bytes', async (t) => {
  const made = signed('0.2.0');
  const rotated = signed('0.3.0');
  const m = await startMaster(t, { releaseKeyPaths: [made.publicKey, rotated.publicKey] });
  const upload = (bundle: Buffer, signature: unknown) =>
    call(m.url, 'POST', '/api/agent-bundles', {
      token: m.admin,
      body: { bundle: bundle.toString('base64'), signature },
    });

  const kept = await upload(made.bundle, made.signature);
  assert.equal(kept.status, 201, JSON.stringify(kept.body));
  assert.equal(kept.body.version, '0.2.0');
  assert.equal(kept.body.sha256, made.signature.sha256);
  assert.equal((await upload(rotated.bundle, rotated.signature)).status, 201, 'a second key, as while one is replaced');
  assertProblem(await upload(made.bundle, made.signature), 409, 'conflict');

  const stranger = signed('0.4.0');
  const cases: [string, Buffer, unknown, RegExp][] = [
    [
      'bytes that are not the signed ones',
      Buffer.concat([made.bundle, Buffer.from(' ')]),
      made.signature,
      /not the one signed/,
    ],
    ['another version claimed', made.bundle, { ...made.signature, version: '9.9.9' }, /signed facts were altered/],
    ['a key the master was not given', stranger.bundle, stranger.signature, /not a release key trusted here/],
  ];
  for (const [what, bundle, signature, detail] of cases) {
    const refused = await upload(bundle, signature);
    assertProblem(refused, 422, 'validation_failed');
    assert.match(refused.body.errors[0].detail, detail, what);
  }
  const listed = await call(m.url, 'GET', '/api/agent-bundles', { token: m.admin });
  assert.deepEqual(
    listed.body.items.map((b: { version: string }) => b.version),
    ['0.2.0', '0.3.0'],
    'nothing refused was kept',
  );
  assert.equal((await call(m.url, 'DELETE', `/api/agent-bundles/${kept.body.id}`, { token: m.admin })).status, 204);
  // As many as it keeps, then one more.
  const key = readFileSync(join(made.dir, 'release-private.pem'), 'utf8');
  for (let minor = 1; minor <= MAX_BUNDLES; minor++) {
    const bundle = Buffer.from(`console.log('agent 1.${minor}.0');\n`);
    const answer = await upload(bundle, signBundle(bundle, `1.${minor}.0`, key));
    assert.equal(answer.status, minor < MAX_BUNDLES ? 201 : 409, `bundle ${minor}: ${JSON.stringify(answer.body)}`);
  }

  const keyless = await startMaster(t);
  const refused = await call(keyless.url, 'POST', '/api/agent-bundles', {
    token: keyless.admin,
    body: { bundle: made.bundle.toString('base64'), signature: made.signature },
  });
  assertProblem(refused, 409, 'conflict');
  assert.match(refused.body.detail, /no release key .* --release-key/);
});

const TRUST_GIVEN =
  "an agent is given the master's release keys with its command, and says which it trusts when it links; one " +
  'given a key that is not one does not start';

test(TRUST_GIVEN, async (t) => {
  const [first, second] = [signed('0.2.0'), signed('0.3.0')];
  const m = await startMaster(t, { releaseKeyPaths: [first.publicKey, second.publicKey] });
  const keys = [first, second].map((made) => createPublicKey(readFileSync(made.publicKey, 'utf8')));
  const edge = await node(m, 'edge');
  const given = keys.map(releaseKeyText).join(',');
  assert.ok(edge.agent_command.includes(` --release-key '${given}'`), edge.agent_command);
  assert.deepEqual(edge.agent_release_keys, []);

  await agentInProcess(t, m.url, edge.agent_token, { extraArgs: ['--release-key', given] });
  const shown = await until('the agent to link', async () => {
    const got = (await call(m.url, 'GET', `/api/nodes/${edge.id}`, { token: m.admin })).body;
    return got.status === 'online' && got;
  });
  assert.deepEqual(shown.agent_release_keys, keys.map(keyIdOf));

  const refused = spawnSync(
    process.execPath,
    ['--import', 'tsx', 'cmd/agent/main.ts', '--master', m.url, '--release-key', 'not-a-key'],
    { encoding: 'utf8', env: { ...process.env, AGENT_TOKEN: edge.agent_token }, timeout: 10_000 },
  );
  assert.equal(refused.status, 2, refused.stderr);
  assert.match(refused.stderr, /--release-key: 'not-a-key' is not a release key/);
});

const OWN_AGENT =
  "a master given the release's signature of the agent it carries keeps that agent among its bundles, and does " +
  'not start with one that does not verify';

test(OWN_AGENT, async (t) => {
  const made = signed('0.2.0');
  const key = readFileSync(join(made.dir, 'release-private.pem'), 'utf8');
  const own = readFileSync(built('agent'));
  const signaturePath = join(made.dir, 'agent.mjs.sig');
  writeFileSync(signaturePath, JSON.stringify(signBundle(own, VERSION, key)));
  const m = await startMaster(t, { releaseKeyPaths: [made.publicKey], agentSignaturePath: signaturePath });
  const listed = await call(m.url, 'GET', '/api/agent-bundles', { token: m.admin });
  assert.deepEqual(
    listed.body.items.map((b: { version: string; size: number }) => [b.version, b.size]),
    [[VERSION, own.length]],
  );

  writeFileSync(signaturePath, JSON.stringify(signBundle(own, '9.0.0', key)));
  await assert.rejects(
    startMaster(t, { releaseKeyPaths: [made.publicKey], agentSignaturePath: signaturePath }),
    new RegExp(`cannot use the agent signature .*it signs agent 9\\.0\\.0, and this master carries ${VERSION}`),
  );
  writeFileSync(signaturePath, JSON.stringify(signBundle(Buffer.from('another agent'), VERSION, key)));
  await assert.rejects(
    startMaster(t, { releaseKeyPaths: [made.publicKey], agentSignaturePath: signaturePath }),
    /not the one signed/,
  );
});

const PROMOTED_CARRIES =
  'a standby given the signature of the agent it carries, whose primary was given none, carries that agent once ' +
  'promoted, as a primary does from its start';

test(PROMOTED_CARRIES, async (t) => {
  const made = signed('0.2.0');
  const key = readFileSync(join(made.dir, 'release-private.pem'), 'utf8');
  const signaturePath = join(made.dir, 'agent.mjs.sig');
  writeFileSync(signaturePath, JSON.stringify(signBundle(readFileSync(built('agent')), VERSION, key)));
  const primary = await startMaster(t, { releaseKeyPaths: [made.publicKey] });
  const token = await mintToken(primary, ['replication'], 'standby');
  const standby = await startMaster(t, {
    follow: { url: primary.url, token },
    releaseKeyPaths: [made.publicKey],
    agentSignaturePath: signaturePath,
  });
  const versions = async () => {
    const listed = await call(standby.url, 'GET', '/api/agent-bundles', { token: primary.admin });
    return listed.body.items.map((bundle: { version: string }) => bundle.version);
  };
  assert.deepEqual(await versions(), [], 'a standby writes nothing of its own');
  await primary.close();
  assert.equal((await call(standby.url, 'POST', '/api/replication/promote', { token: primary.admin })).status, 200);
  await until('the promoted standby carrying its agent', async () => (await versions()).includes(VERSION));
});
