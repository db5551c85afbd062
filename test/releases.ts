// Agent releases as a test makes them: a release key of its own, the built agent as another version (or broken on
// purpose), signed, and given to a master.

import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { releaseKeyText, signBundle } from '../internal/release/signature.ts';
import { VERSION } from '../internal/version.ts';
import { call, type Running } from './helpers.ts';
import { built } from './dist.ts';

const keys = generateKeyPairSync('ed25519');
const privatePem = keys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

/** The release key's public half as a master is given it (a PEM file), and as an agent is (its text). */
export function releaseKey(): { path: string; text: string } {
  const path = join(mkdtempSync(join(tmpdir(), 'portplane-release-')), 'release-public.pem');
  writeFileSync(path, keys.publicKey.export({ type: 'spki', format: 'pem' }));
  return { path, text: releaseKeyText(keys.publicKey) };
}

/** The built agent (dist/agent.mjs) as `version`, changed by `edit` (to break it): what a release would be. */
export function agentAs(version: string, edit?: (text: string) => string): Buffer {
  const text = readFileSync(built('agent'), 'utf8');
  const versioned = text.replace(`var VERSION = "${VERSION}";`, `var VERSION = "${version}";`);
  assert.notEqual(versioned, text, 'the built agent names its version');
  const edited = edit ? edit(versioned) : versioned;
  // An edit that finds nothing to change would test the built agent as it is.
  if (edit) assert.notEqual(edited, versioned, 'the edit found what it changes in the built agent');
  return Buffer.from(edited);
}

/** Gives the master `bundle`, signed by the release key as `version`. */
export async function upload(m: Running, version: string, bundle: Buffer): Promise<void> {
  const signature = signBundle(bundle, version, privatePem);
  const body = { bundle: bundle.toString('base64'), signature };
  const answer = await call(m.url, 'POST', '/api/agent-bundles', { token: m.admin, body });
  assert.equal(answer.status, 201, JSON.stringify(answer.body));
}

/** Starts a rollout (soaking each node 3 s unless `body` says otherwise); returns it. */
export async function startRollout(m: Running, body: Record<string, unknown>): Promise<{ id: number }> {
  const answer = await call(m.url, 'POST', '/api/rollouts', { token: m.admin, body: { soak_seconds: 3, ...body } });
  assert.equal(answer.status, 201, JSON.stringify(answer.body));
  return answer.body as { id: number };
}

export async function rolloutOf(m: Running, id: number) {
  return (await call(m.url, 'GET', `/api/rollouts/${id}`, { token: m.admin })).body;
}
