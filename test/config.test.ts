import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseConfig } from '../cmd/master/config.ts';

test('configuration: flags override MASTER_* environment, which overrides defaults', () => {
  const cases = [
    { argv: [], env: {}, want: { host: '127.0.0.1', port: 8080, dataDir: './data', secretKeyPath: null, licenseKeyPath: null, adminPassword: null } },
    { argv: [], env: { MASTER_LISTEN: '0.0.0.0:9000', MASTER_DATA_DIR: '/var/lib/portplane' }, want: { host: '0.0.0.0', port: 9000, dataDir: '/var/lib/portplane', secretKeyPath: null, licenseKeyPath: null, adminPassword: null } },
    { argv: ['--listen', '[::1]:7000', '--data-dir=/srv/d'], env: { MASTER_LISTEN: '0.0.0.0:9000' }, want: { host: '::1', port: 7000, dataDir: '/srv/d', secretKeyPath: null, licenseKeyPath: null, adminPassword: null } },
    { argv: ['--listen', ':8081', '--license-key', 'k.pem'], env: { MASTER_ADMIN_PASSWORD: 'long-enough-pass' }, want: { host: '0.0.0.0', port: 8081, dataDir: './data', secretKeyPath: null, licenseKeyPath: 'k.pem', adminPassword: 'long-enough-pass' } },
    { argv: ['--secret-key', '/etc/portplane/secret.key'], env: { MASTER_SECRET_KEY: '/elsewhere' }, want: { host: '127.0.0.1', port: 8080, dataDir: './data', secretKeyPath: '/etc/portplane/secret.key', licenseKeyPath: null, adminPassword: null } },
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
  assert.deepEqual(parseAgentConfig(['--master', 'http://10.0.0.1:8080/'], { AGENT_TOKEN: token }), {
    config: { masterUrl: 'http://10.0.0.1:8080', token, stateDir: './agent-state', listenHost: '0.0.0.0' },
  });
  assert.deepEqual(parseAgentConfig(['--state-dir=/var/lib/pp', '--listen-host', '::'], { AGENT_MASTER_URL: 'https://m.example', AGENT_TOKEN: token }), {
    config: { masterUrl: 'https://m.example', token, stateDir: '/var/lib/pp', listenHost: '::' },
  });
  const errors: [string[], Record<string, string>, RegExp][] = [
    [[], { AGENT_TOKEN: token }, /--master/],
    [['--master', 'not a url'], { AGENT_TOKEN: token }, /must be http\(s\):\/\/HOST/],
    [['--master', 'http://10.0.0.1:8080/a/path'], { AGENT_TOKEN: token }, /must be http\(s\):\/\/HOST/],
    [['--master', 'http://a$(reboot)b:8080'], { AGENT_TOKEN: token }, /must be http\(s\):\/\/HOST/],
    [['--master', 'http://m'], {}, /agent token/],
    [['--master', 'http://m', '--token', 'mst_abc'], {}, /agent token/],
    [['--master', 'http://m', '--bogus'], { AGENT_TOKEN: token }, /unknown option/],
  ];
  for (const [argv, env, want] of errors) {
    const result = parseAgentConfig(argv, env);
    assert.ok('error' in result && want.test(result.error), `${argv.join(' ')} -> ${JSON.stringify(result)}`);
  }
});

test('agent env files are data: each line KEY=VALUE taken literally, never through a shell; flags win over the file, the file over the environment', async () => {
  const { parseAgentConfig, parseEnvFile } = await import('../cmd/agent/config.ts');
  const token = `mat_7_${'a'.repeat(43)}`;
  const files: Record<string, string> = {
    '/etc/good.env': `# written by install-ssh\nAGENT_MASTER_URL=https://m.example:8443\nAGENT_TOKEN=${token}\n\n`,
    '/etc/hostile.env': `AGENT_MASTER_URL=http://x$(touch /tmp/pwned):1\nAGENT_TOKEN=${token}\n`,
    '/etc/quoted.env': `AGENT_MASTER_URL="https://m.example"\nAGENT_TOKEN=${token}\n`,
    '/etc/other.env': `PATH=/evil\nAGENT_TOKEN=${token}\n`,
  };
  const read = (path: string) => {
    if (!(path in files)) throw new Error('ENOENT: no such file');
    return files[path]!;
  };
  assert.deepEqual(parseAgentConfig(['--env-file', '/etc/good.env'], { AGENT_MASTER_URL: 'http://from-env' }, read), {
    config: { masterUrl: 'https://m.example:8443', token, stateDir: './agent-state', listenHost: '0.0.0.0' },
  });
  assert.deepEqual(parseAgentConfig(['--env-file', '/etc/good.env', '--master', 'http://from-flag'], {}, read), {
    config: { masterUrl: 'http://from-flag', token, stateDir: './agent-state', listenHost: '0.0.0.0' },
  });
  assert.deepEqual(parseAgentConfig([], { AGENT_ENV_FILE: '/etc/good.env' }, read), {
    config: { masterUrl: 'https://m.example:8443', token, stateDir: './agent-state', listenHost: '0.0.0.0' },
  });
  const errors: [string, RegExp][] = [
    ['/etc/hostile.env', /must be http\(s\):\/\/HOST.*\$\(touch \/tmp\/pwned\)/],
    ['/etc/quoted.env', /must be http\(s\):\/\/HOST.*"https/],
    ['/etc/other.env', /line 1 is not KEY=VALUE/],
    ['/etc/missing.env', /cannot read --env-file/],
  ];
  for (const [path, want] of errors) {
    const result = parseAgentConfig(['--env-file', path], {}, read);
    assert.ok('error' in result && want.test(result.error), `${path} -> ${JSON.stringify(result)}`);
  }
  assert.deepEqual(parseEnvFile('AGENT_TOKEN=a=b c \'d\' `e`\n'), { AGENT_TOKEN: "a=b c 'd' `e`" });
});

test('master URLs are http(s), a hostname or IP address, and an optional port: nothing a shell or parser could read as syntax', async () => {
  const { masterOrigin } = await import('../internal/schema/net.ts');
  const good: [string, string][] = [
    ['http://192.0.2.1:8080', 'http://192.0.2.1:8080'],
    ['https://Master.Example.net/', 'https://master.example.net'],
    ['https://[2001:db8::1]:8443', 'https://[2001:db8::1]:8443'],
    ['http://localhost', 'http://localhost'],
  ];
  for (const [input, want] of good) assert.equal(masterOrigin(input), want, input);
  const hostile = [
    'http://a$(reboot)b:8080', 'http://a;reboot:8080', 'http://a`id`:1', 'http://a&b', 'http://a|b', "http://a'b", 'http://a"b',
    'http://a b', 'http://user:pw@host', 'http://host/path', 'http://host?x', 'http://host#x', 'ftp://host', 'http://host:0',
    'http://host:65536', 'http://[zz::1]', 'http://host\nAGENT_TOKEN=x', 'http://-host', 'http://host:8080 --evil', '',
  ];
  for (const input of hostile) assert.equal(masterOrigin(input), null, JSON.stringify(input));
});
