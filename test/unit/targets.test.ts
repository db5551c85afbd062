import assert from 'node:assert/strict';
import { test } from 'node:test';
import { targetRefusal, type TargetPolicy } from '../../internal/domain/rules.ts';

const NODE = '203.0.113.5';
const strict: TargetPolicy = { allowLocal: false, masterHosts: ['master.example.net'] };
const local: TargetPolicy = { allowLocal: true, masterHosts: ['master.example.net'] };

// Where a rule on NODE may send, by default and with allow_local_rule_targets: the target, the policy, and the words
// its refusal must hold (null: allowed).
const cases: [string, TargetPolicy, string | null][] = [
  ['192.0.2.10', strict, null],
  ['backend.example.com', strict, null],
  ['127.0.0.1', strict, 'loopback'],
  ['::1', strict, 'loopback'],
  ['localhost', strict, 'names the node itself'],
  ['api.LOCALHOST', strict, 'names the node itself'],
  ['169.254.169.254', strict, 'link-local'],
  [NODE, strict, 'is the node itself'],
  [`::ffff:${NODE}`, strict, 'is the node itself'],
  ['MASTER.example.net', strict, 'is the master'],
  ['127.0.0.1', local, null],
  [NODE, local, null],
  ['0.0.0.0', local, 'no host to forward to'],
  ['224.0.0.1', local, 'no host to forward to'],
  ['255.255.255.255', strict, 'no host to forward to'],
];

const nameOf = (host: string, policy: TargetPolicy, refusal: string | null) =>
  `${host} is ${refusal === null ? 'a target' : `refused (${refusal})`}` +
  (policy.allowLocal ? ' with allow_local_rule_targets' : '');

for (const [host, policy, refusal] of cases)
  test(nameOf(host, policy, refusal), () => {
    const got = targetRefusal(host, NODE, policy);
    if (refusal === null) assert.equal(got, null);
    else assert.ok(got?.includes(refusal), `${host}: ${got}`);
  });
