import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseConfig } from '../cmd/master/config.ts';

test('configuration: flags override MASTER_* environment, which overrides defaults', () => {
  const cases = [
    { argv: [], env: {}, want: { host: '127.0.0.1', port: 8080, dataDir: './data', licenseKeyPath: null, adminPassword: null } },
    { argv: [], env: { MASTER_LISTEN: '0.0.0.0:9000', MASTER_DATA_DIR: '/var/lib/portplane' }, want: { host: '0.0.0.0', port: 9000, dataDir: '/var/lib/portplane', licenseKeyPath: null, adminPassword: null } },
    { argv: ['--listen', '[::1]:7000', '--data-dir=/srv/d'], env: { MASTER_LISTEN: '0.0.0.0:9000' }, want: { host: '::1', port: 7000, dataDir: '/srv/d', licenseKeyPath: null, adminPassword: null } },
    { argv: ['--listen', ':8081', '--license-key', 'k.pem'], env: { MASTER_ADMIN_PASSWORD: 'long-enough-pass' }, want: { host: '0.0.0.0', port: 8081, dataDir: './data', licenseKeyPath: 'k.pem', adminPassword: 'long-enough-pass' } },
  ];
  for (const { argv, env, want } of cases) assert.deepEqual(parseConfig(argv, env), { config: want }, argv.join(' '));
});

test('configuration errors say what is wrong', () => {
  const cases: [string[], Record<string, string>, RegExp][] = [
    [['--listen', 'localhost'], {}, /HOST:PORT/],
    [['--listen', '1.2.3.4:70000'], {}, /HOST:PORT/],
    [['--listen'], {}, /needs a value/],
    [['--port', '1'], {}, /unknown option/],
    [[], { MASTER_ADMIN_PASSWORD: 'short' }, /at least 10/],
  ];
  for (const [argv, env, want] of cases) {
    const result = parseConfig(argv, env);
    assert.ok('error' in result && want.test(result.error), `${argv.join(' ')} -> ${JSON.stringify(result)}`);
  }
  assert.deepEqual(parseConfig(['--help'], {}), { exit: 'help' });
  assert.deepEqual(parseConfig(['--version'], {}), { exit: 'version' });
});
