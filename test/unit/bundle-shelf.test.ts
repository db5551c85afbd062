// The bundles a node keeps (agent/bundles.ts): verified when kept and again when run, switched to on trial, undone
// unless confirmed, and set aside by a reinstall.

import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { BundleShelf, keepBundle } from '../../internal/agent/bundles.ts';
import { BundleRefused, signBundle } from '../../internal/release/signature.ts';

const keys = generateKeyPairSync('ed25519');
const privatePem = keys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

function setUp() {
  const stateDir = mkdtempSync(join(tmpdir(), 'portplane-shelf-'));
  const launcher = join(stateDir, 'agent.mjs');
  writeFileSync(launcher, '// the installed agent\n');
  const keep = (version: string, text = `// agent ${version}\n`) =>
    keepBundle(
      stateDir,
      [keys.publicKey],
      Buffer.from(text),
      JSON.stringify(signBundle(Buffer.from(text), version, privatePem)),
    );
  return { stateDir, launcher, keep, shelf: new BundleShelf(stateDir, [keys.publicKey], launcher) };
}

test('a bundle is kept only when its signature verifies, and nothing is written otherwise', () => {
  const { stateDir, keep } = setUp();
  const text = Buffer.from('// agent 0.2.0\n');
  const signature = JSON.stringify(signBundle(text, '0.2.0', privatePem));
  const refusals: [Buffer, string, RegExp][] = [
    [Buffer.concat([text, Buffer.from(' ')]), signature, /not the one signed/],
    [text, '{not json', /not JSON/],
    [text, JSON.stringify({ ...JSON.parse(signature), version: '0.3.0' }), /altered/],
  ];
  for (const [bundle, sig, reason] of refusals)
    assert.throws(
      () => keepBundle(stateDir, [keys.publicKey], bundle, sig),
      (e) => e instanceof BundleRefused && reason.test(e.message),
    );
  assert.equal(existsSync(join(stateDir, 'bundles')), false);
  assert.equal(keep('0.2.0').version, '0.2.0');
});

test('a switch runs the new bundle only once confirmed; unconfirmed, a start goes back to what ran before', () => {
  const { shelf, keep } = setUp();
  assert.equal(shelf.toRun(), null, 'nothing kept: the launcher');
  const first = keep('0.2.0');
  shelf.switchTo(first);
  assert.equal(shelf.toRun(), null, 'a trial never confirmed is undone at a start');
  shelf.switchTo(first);
  shelf.confirm();
  assert.equal(shelf.toRun()?.version, '0.2.0');
  const second = keep('0.3.0');
  shelf.switchTo(second);
  assert.equal(shelf.toRun()?.version, '0.2.0', 'back to the confirmed one before');
  shelf.switchTo(second);
  shelf.confirm();
  assert.equal(shelf.toRun()?.version, '0.3.0');
});

test('a confirmed switch keeps the bundle before and removes older ones', () => {
  const { shelf, keep, stateDir } = setUp();
  for (const version of ['0.2.0', '0.3.0', '0.4.0']) {
    shelf.switchTo(keep(version));
    shelf.confirm();
  }
  const files = readdirSync(join(stateDir, 'bundles')).filter((name) => name.endsWith('.mjs'));
  assert.equal(files.length, 2, files.join(', '));
});

test('a kept bundle changed on disk is refused, and a reinstalled launcher wins over every kept bundle', () => {
  const { shelf, keep, stateDir, launcher } = setUp();
  const kept = keep('0.2.0');
  shelf.switchTo(kept);
  shelf.confirm();
  writeFileSync(join(stateDir, 'bundles', `${kept.sha256}.mjs`), '// something else\n');
  assert.throws(() => shelf.toRun(), BundleRefused);
  shelf.switchTo(keep('0.3.0'));
  shelf.confirm();
  writeFileSync(launcher, '// the agent a reinstall wrote\n');
  assert.equal(shelf.toRun(), null);
});
