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

test('agent configuration: flags over AGENT_* environment; the token and URL are checked', async () => {
  const { parseAgentConfig } = await import('../cmd/agent/config.ts');
  const token = `mat_7_${'a'.repeat(43)}`;
  assert.deepEqual(parseAgentConfig(['--master', 'http://10.0.0.1:8080/ignored/path'], { AGENT_TOKEN: token }), {
    config: { masterUrl: 'http://10.0.0.1:8080', token, stateDir: './agent-state', listenHost: '0.0.0.0' },
  });
  assert.deepEqual(parseAgentConfig(['--state-dir=/var/lib/pp', '--listen-host', '::'], { AGENT_MASTER_URL: 'https://m.example', AGENT_TOKEN: token }), {
    config: { masterUrl: 'https://m.example', token, stateDir: '/var/lib/pp', listenHost: '::' },
  });
  const errors: [string[], Record<string, string>, RegExp][] = [
    [[], { AGENT_TOKEN: token }, /--master/],
    [['--master', 'not a url'], { AGENT_TOKEN: token }, /must be a URL/],
    [['--master', 'http://m'], {}, /agent token/],
    [['--master', 'http://m', '--token', 'mst_abc'], {}, /agent token/],
    [['--master', 'http://m', '--bogus'], { AGENT_TOKEN: token }, /unknown option/],
  ];
  for (const [argv, env, want] of errors) {
    const result = parseAgentConfig(argv, env);
    assert.ok('error' in result && want.test(result.error), `${argv.join(' ')} -> ${JSON.stringify(result)}`);
  }
});
