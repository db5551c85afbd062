// A small client written against the types openapi-typescript generates from the served
// OpenAPI document (api.gen.ts): if the document stops naming the resources, inputs and
// operations a client needs, this stops compiling. test/contract.test.ts generates the types,
// type-checks this file, and runs it against a real master: node --import tsx client.ts BASE TOKEN.

import type { components, operations } from './api.gen.ts';

type Schemas = components['schemas'];

const [base, token] = process.argv.slice(2);

async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const json: unknown = await response.json();
  if (!response.ok) {
    const problem = json as Schemas['Problem'];
    throw new Error(`${method} ${path}: ${problem.status} ${problem.code}: ${problem.detail}`);
  }
  return json as T;
}

const nodeInput: Schemas['NodeInput'] = { name: 'contract-edge', host: '192.0.2.10' };
const created = await api<Schemas['NodeCreated']>('POST', '/api/nodes', nodeInput);
const nodeId: operations['getNode']['parameters']['path']['id'] = created.id;
const node = await api<Schemas['Node']>('GET', `/api/nodes/${nodeId}`);

const ruleInput: Schemas['RuleInput'] = {
  name: 'web',
  node_id: node.id,
  protocol: 'tcp',
  listen_port: 8080,
  targets: ['10.0.0.1:80'],
};
const rule = await api<Schemas['Rule']>('POST', '/api/rules', ruleInput);
const state: 'pending' | 'applied' | 'failed' = rule.sync.state;
const page = await api<Schemas['RulePage']>('GET', `/api/rules?node_id=${node.id}`);
if (page.items[0]?.id !== rule.id) throw new Error('the new rule is not on its node');

try {
  await api<Schemas['Rule']>('POST', '/api/rules', { ...ruleInput, name: 'clash' });
  throw new Error('a second rule on the same port was accepted');
} catch (error) {
  if (!/409 conflict/.test((error as Error).message)) throw error;
}

console.log(JSON.stringify({ node: node.name, status: node.status, rule: rule.id, state }));
