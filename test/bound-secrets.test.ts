// A stored secret never follows its resource elsewhere: every field that decides where a kept secret goes (or who
// reads what it guards) changes only with the secret given again, for every resource that keeps one. The table is
// the class: every secret field a PUT takes is either bound here or said to go nowhere.

import assert from 'node:assert/strict';
import test from 'node:test';
import { routes } from '../internal/api/routes.ts';
import { secretFields } from '../internal/schema/schema.ts';
import { CHANNEL_SECRETS } from '../internal/service/channels.ts';
import { NODE_SECRET } from '../internal/service/nodes.ts';
import type { SecretBinding } from '../internal/service/bound-secrets.ts';
import { assertProblem, call, startMaster, type Running } from './helpers.ts';

/** Secrets a PUT takes that are sent nowhere: nothing to bind them to. */
const SENT_NOWHERE: Record<string, string> = { password: "a user's password is only hashed and compared" };

interface Resource {
  path: string;
  binding: SecretBinding;
  /** The resource with its secret, as created. */
  create: Record<string, unknown>;
  /** For each bound field, a value other than the created one. */
  moves: Record<string, unknown>;
  /** The secret given again, in the fields that give it. */
  again: Record<string, unknown>;
  /** Fields that change freely. */
  free: Record<string, unknown>;
}

const PEM = '-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n';
const resources: Record<string, Resource> = {
  node: {
    path: '/api/nodes',
    binding: NODE_SECRET,
    create: { name: 'n1', host: 'n1.example.net', ssh_password: 'hunter2hunter2' },
    moves: { host: 'elsewhere.example.org', ssh_port: 2222, ssh_user: 'deploy' },
    again: { ssh_private_key: PEM },
    free: { name: 'n1-renamed', tags: ['eu'] },
  },
  'webhook channel': {
    path: '/api/channels',
    binding: CHANNEL_SECRETS.webhook,
    create: { name: 'hook', type: 'webhook', url: 'https://hooks.example.com/a' },
    moves: { url: 'https://attacker.example.org/a' },
    again: { secret: 'whsec_' + Buffer.alloc(32, 7).toString('base64') },
    free: { name: 'hook-renamed' },
  },
  'telegram channel': {
    path: '/api/channels',
    binding: CHANNEL_SECRETS.telegram,
    create: { name: 'bot', type: 'telegram', chat_id: '42', bot_token: '123456:' + 'T'.repeat(35) },
    moves: { api_base: 'https://attacker.example.org', chat_id: '666' },
    again: { bot_token: '123456:' + 'U'.repeat(35) },
    free: { name: 'bot-renamed' },
  },
  'email channel': {
    path: '/api/channels',
    binding: CHANNEL_SECRETS.email,
    create: {
      name: 'mail',
      type: 'email',
      smtp_host: 'smtp.example.com',
      smtp_username: 'alerts',
      smtp_password: 'mail-password',
      from: 'a@example.com',
      to: ['b@example.com'],
    },
    moves: {
      smtp_host: 'smtp.attacker.example.org',
      smtp_port: 2525,
      smtp_security: 'tls',
      smtp_ca: '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n',
      smtp_username: 'someone-else',
    },
    again: { smtp_password: 'mail-password-2' },
    free: { name: 'mail-renamed', from: 'c@example.com', to: ['d@example.com'] },
  },
  // Chat channels whose address is the secret: nothing else decides where it goes.
  ...Object.fromEntries(
    (['slack', 'discord', 'teams'] as const).map((type) => [
      `${type} channel`,
      {
        path: '/api/channels',
        binding: CHANNEL_SECRETS[type],
        create: { name: type, type, webhook_url: 'https://hooks.example.com/T1/B1/secret' },
        moves: {},
        again: { webhook_url: 'https://hooks.example.com/T1/B1/other' },
        free: { name: `${type}-renamed` },
      },
    ]),
  ),
  'ntfy channel': {
    path: '/api/channels',
    binding: CHANNEL_SECRETS.ntfy,
    create: { name: 'phones', type: 'ntfy', topic_url: 'https://ntfy.example.com/secret', access_token: 'tk_1' },
    moves: {},
    again: { topic_url: 'https://ntfy.example.com/other' },
    free: { name: 'phones-renamed' },
  },
};

test('every secret a PUT takes is bound to where it goes, or goes nowhere', () => {
  const taken = secretFields(routes.filter((r) => r.method === 'PUT').map((r) => r.body?.json ?? {}));
  const bound = new Set(Object.values(resources).flatMap((r) => r.binding.given));
  for (const field of taken)
    assert.ok(bound.has(field) || field in SENT_NOWHERE, `${field} is a secret a PUT takes, bound to nothing`);
  for (const resource of Object.values(resources))
    assert.deepEqual(Object.keys(resource.moves).sort(), [...resource.binding.bound].sort(), resource.path);
});

/** What a GET shows of a resource, as a PUT body: without what the API makes itself. */
async function current(m: Running, path: string) {
  const shown = await call(m.url, 'GET', path, { token: m.admin });
  assert.equal(shown.status, 200);
  return shown.body as Record<string, unknown>;
}

for (const [what, resource] of Object.entries(resources)) {
  const bound = resource.binding.bound.join(', ') || 'anything (its address is the secret)';
  test(`${what}: its stored secret follows no change of ${bound} unless given again`, async (t) => {
    const m = await startMaster(t);
    const made = await call(m.url, 'POST', resource.path, { token: m.admin, body: resource.create });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const path = `${resource.path}/${made.body.id}`;
    const put = (body: Record<string, unknown>) => call(m.url, 'PUT', path, { token: m.admin, body });
    for (const [field, value] of Object.entries(resource.moves)) {
      const before = await current(m, path);
      const refused = await put({ ...before, [field]: value });
      assertProblem(refused, 422, 'validation_failed');
      assert.equal(refused.body.errors[0].pointer, `#/${resource.binding.given[0]}`, `${what}: ${field}`);
      assert.match(refused.body.errors[0].detail, new RegExp(`changing ${field} needs the ${resource.binding.label}`));
      for (const way of [...resource.binding.given, resource.binding.dropped ?? []].flat())
        assert.ok(refused.body.errors[0].detail.includes(way), `${what}: the refusal says how: ${way}`);
      assert.deepEqual(await current(m, path), before, `${what}: a refused ${field} changed nothing`);
    }
    const freed = await put({ ...(await current(m, path)), ...resource.free });
    assert.equal(freed.status, 200, `${what}: ${JSON.stringify(freed.body)}`);
    const moved = await put({ ...(await current(m, path)), ...resource.moves, ...resource.again });
    assert.equal(moved.status, 200, `${what}: ${JSON.stringify(moved.body)}`);
    for (const [field, value] of Object.entries(resource.moves)) assert.deepEqual(moved.body[field], value, field);
  });
}

test('a mail channel left without a login drops its password', async (t) => {
  const m = await startMaster(t);
  const mail = resources['email channel']!.create;
  const made = await call(m.url, 'POST', '/api/channels', { token: m.admin, body: mail });
  const path = `/api/channels/${made.body.id}`;
  const { smtp_username: _, smtp_password: __, ...noLogin } = mail;
  const dropped = await call(m.url, 'PUT', path, { token: m.admin, body: noLogin });
  assert.equal(dropped.status, 200, JSON.stringify(dropped.body));
  assert.equal(dropped.body.has_secret, false);
});
