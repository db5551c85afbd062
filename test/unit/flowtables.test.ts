import assert from 'node:assert/strict';
import { test } from 'node:test';
import { flowtableDevices } from '../../internal/kernel/ruleset.ts';

test("flow offload is found in any table's flowtables, by device, once each", () => {
  const listing = JSON.stringify({
    nftables: [
      { metainfo: { version: '1.0.6' } },
      { flowtable: { family: 'inet', name: 'ft', table: 'fw4', hook: 'ingress', prio: 0, dev: ['eth1', 'eth0'] } },
      { flowtable: { family: 'ip', name: 'one', table: 'other', hook: 'ingress', prio: 0, dev: 'eth0' } },
    ],
  });
  assert.deepEqual(flowtableDevices(listing), ['eth0', 'eth1']);
});

test('no flowtable, or a listing that is not one, is no offload', () => {
  assert.deepEqual(flowtableDevices(JSON.stringify({ nftables: [{ metainfo: {} }] })), []);
  assert.deepEqual(flowtableDevices('nft: not JSON'), []);
  assert.deepEqual(flowtableDevices(JSON.stringify({ nftables: [{ flowtable: { dev: [7, null] } }] })), []);
});
