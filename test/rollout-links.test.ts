// A rollout as the master runs it, with raw links standing in for agents: what it is given is checked, a canary wave
// goes before the rest, each node passes once it links again with the new version and applies its config, and an
// operator pauses, resumes and aborts it. Real agents through real upgrades, with their supervisors, watchdogs and
// soaks, are test/e2e/rollouts.test.ts's.

import assert from 'node:assert/strict';
import { createPublicKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { test, type TestContext } from 'node:test';
import { LINK_PROTOCOL, send } from '../internal/agentlink/wire.ts';
import { keyIdOf } from '../internal/release/signature.ts';
import { VERSION } from '../internal/version.ts';
import { assertProblem, call, node, startMaster, type Running } from './helpers.ts';
import { until } from './net.ts';
import { link, type RawLink } from './rawlink.ts';
import { releaseKey, rolloutOf, startRollout, upload } from './releases.ts';

/** Links as an agent of `version` trusting `keyId`, and applies the config it is sent. */
async function linked(t: TestContext, m: Running, token: string, version: string, keyId: string): Promise<RawLink> {
  const raw = await link(m, token, LINK_PROTOCOL, version, { 'X-Agent-Release-Keys': keyId });
  assert.ok('socket' in raw, JSON.stringify(raw));
  t.after(() => raw.socket.destroy());
  const config = (await raw.next('config')) as unknown as { version: number };
  send(raw.socket, { type: 'applied', version: config.version, results: [] });
  return raw;
}

/** An agent that, sent an upgrade, links again as the version it was sent; returns the versions it was sent. */
async function upgradable(t: TestContext, m: Running, token: string, keyId: string): Promise<string[]> {
  const sent: string[] = [];
  const serve = async (raw: RawLink) => {
    const order = (await raw.next('upgrade')) as unknown as { version: string };
    sent.push(order.version);
    raw.socket.destroy();
    await serve(await linked(t, m, token, order.version, keyId));
  };
  void serve(await linked(t, m, token, VERSION, keyId)).catch(() => undefined);
  return sent;
}

async function rolloutNodes(m: Running, id: number): Promise<{ node_id: number; state: string }[]> {
  return (await call(m.url, 'GET', `/api/rollouts/${id}/nodes?limit=100`, { token: m.admin })).body.items;
}

test('a rollout is checked first, passes a canary wave then the rest as nodes link again with it', async (t) => {
  const key = releaseKey();
  const keyId = keyIdOf(createPublicKey(readFileSync(key.path)));
  const m = await startMaster(t, { releaseKeyPaths: [key.path] });
  await upload(m, '0.5.0', Buffer.from('// a bundle no node here runs: raw links stand in for its agents\n'));
  const nodes = [await node(m, 'edge-0'), await node(m, 'edge-1'), await node(m, 'edge-2')];
  const sent = [];
  for (const made of nodes) sent.push(await upgradable(t, m, made.agent_token, keyId));
  const ids = nodes.map((made) => made.id);
  const rollouts = (body: Record<string, unknown>) => call(m.url, 'POST', '/api/rollouts', { token: m.admin, body });
  assertProblem(await rollouts({ version: '9.9.9', ids, waves: ['100%'] }), 422, 'validation_failed');
  const short = await rollouts({ version: '0.5.0', ids, waves: [1] });
  assertProblem(short, 422, 'validation_failed');
  assert.match(JSON.stringify(short.body), /the waves take 1 of the 3 nodes/);

  const plan = { version: '0.5.0', ids, waves: [1, '100%'], pause_seconds: 0, soak_seconds: 0 };
  const { id } = await startRollout(m, plan);
  assertProblem(await rollouts({ version: '0.5.0', ids, waves: ['100%'] }), 409, 'conflict');
  // A turn of the master's clock at each look rather than each second (the clock itself stands still).
  await until('the rollout finished', async () => (await m.turn(), await rolloutOf(m, id)).state === 'done');
  assert.deepEqual(sent, [['0.5.0'], ['0.5.0'], ['0.5.0']]);
  assert.deepEqual(
    (await rolloutNodes(m, id)).map((n) => n.state),
    ['passed', 'passed', 'passed'],
  );
  for (const made of nodes) {
    const found = (await call(m.url, 'GET', `/api/nodes/${made.id}`, { token: m.admin })).body;
    assert.equal(found.agent_version, '0.5.0');
  }
});

test('a rollout pauses, resumes and aborts: a wave not begun sends no node its upgrade', async (t) => {
  const key = releaseKey();
  const keyId = keyIdOf(createPublicKey(readFileSync(key.path)));
  const m = await startMaster(t, { releaseKeyPaths: [key.path] });
  await upload(m, '0.5.0', Buffer.from('// a bundle no node here runs: raw links stand in for its agents\n'));
  const nodes = [await node(m, 'edge-0'), await node(m, 'edge-1')];
  const sent = [];
  for (const made of nodes) sent.push(await upgradable(t, m, made.agent_token, keyId));
  const ids = nodes.map((made) => made.id);
  const body = { version: '0.5.0', ids, waves: [1, '100%'], pause_seconds: 3600, soak_seconds: 0 };
  const { id } = await startRollout(m, body);
  await until('the canary wave passed', async () => (await m.turn(), await rolloutOf(m, id)).wave_passed_at !== null);
  const paused = await call(m.url, 'POST', `/api/rollouts/${id}/pause`, { token: m.admin });
  assert.equal(paused.body.state, 'paused');
  assertProblem(await call(m.url, 'POST', `/api/rollouts/${id}/pause`, { token: m.admin }), 409, 'conflict');
  assert.equal((await call(m.url, 'POST', `/api/rollouts/${id}/resume`, { token: m.admin })).body.state, 'running');
  const aborted = await call(m.url, 'POST', `/api/rollouts/${id}/abort`, { token: m.admin });
  assert.equal(aborted.body.state, 'aborted');
  assert.equal(aborted.body.reason, 'aborted by an operator');
  // The master's clock past the pause: the second wave never starts.
  m.advance(2 * 3600_000);
  await until('the rollout was looked at since', async () => (await rolloutOf(m, id)).state === 'aborted');
  assert.deepEqual(sent, [['0.5.0'], []]);
  assert.deepEqual(
    (await rolloutNodes(m, id)).map((n) => n.state),
    ['passed', 'waiting'],
  );
});
