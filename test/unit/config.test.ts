import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { test } from 'node:test';
import { parseConfig } from '../../cmd/master/config.ts';

test('configuration: flags override MASTER_* environment, which overrides defaults', () => {
  const base = {
    host: '127.0.0.1',
    port: 8080,
    dataDir: './data',
    secretKeyPath: null,
    licenseKeyPath: null,
    releaseKeyPaths: [],
    agentSignaturePath: null,
    adminPassword: null,
    follow: null,
    etcd: null,
    tls: null,
    insecureHttp: false,
  };
  const cases = [
    { argv: [], env: {}, want: base },
    {
      argv: [],
      env: { MASTER_LISTEN: '0.0.0.0:9000', MASTER_DATA_DIR: '/var/lib/portplane' },
      want: { ...base, host: '0.0.0.0', port: 9000, dataDir: '/var/lib/portplane' },
    },
    {
      argv: ['--listen', '[::1]:7000', '--data-dir=/srv/d'],
      env: { MASTER_LISTEN: '0.0.0.0:9000' },
      want: { ...base, host: '::1', port: 7000, dataDir: '/srv/d' },
    },
    {
      argv: ['--listen', ':8081', '--license-key', 'k.pem'],
      env: { MASTER_ADMIN_PASSWORD: 'long-enough-pass' },
      want: { ...base, host: '0.0.0.0', port: 8081, licenseKeyPath: 'k.pem', adminPassword: 'long-enough-pass' },
    },
    {
      argv: ['--release-key', 'old.pem,new.pem'],
      env: { MASTER_RELEASE_KEY: 'elsewhere.pem' },
      want: { ...base, releaseKeyPaths: ['old.pem', 'new.pem'] },
    },
    {
      argv: ['--agent-signature', 'dist/agent.mjs.sig'],
      env: {},
      want: { ...base, agentSignaturePath: 'dist/agent.mjs.sig' },
    },
    {
      argv: ['--secret-key', '/etc/portplane/secret.key'],
      env: { MASTER_SECRET_KEY: '/elsewhere' },
      want: { ...base, secretKeyPath: '/etc/portplane/secret.key' },
    },
    {
      argv: ['--tls-cert', 'c.pem'],
      env: { MASTER_TLS_KEY: 'k.pem' },
      want: { ...base, tls: { certPath: 'c.pem', keyPath: 'k.pem' } },
    },
    {
      argv: ['--listen', '0.0.0.0:80', '--insecure-http'],
      env: {},
      want: { ...base, host: '0.0.0.0', port: 80, insecureHttp: true },
    },
    { argv: [], env: { MASTER_INSECURE_HTTP: '1' }, want: { ...base, insecureHttp: true } },
  ];
  for (const { argv, env, want } of cases) assert.deepEqual(parseConfig(argv, env), { config: want }, argv.join(' '));
});

test('a standby follows a plain http:// primary only on this machine, unless --follow-insecure says so', () => {
  const token = 'mst_' + 'a'.repeat(40);
  const pin = 'sha256/' + Buffer.alloc(32).toString('base64');
  const follows = (argv: string[], env: Record<string, string> = {}) => {
    const result = parseConfig(argv, { MASTER_FOLLOW_TOKEN: token, ...env });
    return 'config' in result ? result.config.follow : result;
  };
  const cases: [string[], Record<string, string>, unknown][] = [
    [['--follow', 'http://127.0.0.1:8080'], {}, { url: 'http://127.0.0.1:8080', pin: null, token }],
    [['--follow', 'http://[::1]:8080'], {}, { url: 'http://[::1]:8080', pin: null, token }],
    [['--follow', 'https://192.0.2.7:8080'], { MASTER_FOLLOW_PIN: pin }, { url: 'https://192.0.2.7:8080', pin, token }],
    [
      ['--follow', 'http://192.0.2.7:8080', '--follow-insecure'],
      {},
      { url: 'http://192.0.2.7:8080', pin: null, token },
    ],
    [
      ['--follow', 'http://192.0.2.7:8080'],
      { MASTER_FOLLOW_INSECURE: '1' },
      { url: 'http://192.0.2.7:8080', pin: null, token },
    ],
  ];
  for (const [argv, env, want] of cases) assert.deepEqual(follows(argv, env), want, argv.join(' '));
  const refused: [string[], Record<string, string>, RegExp][] = [
    [
      ['--follow', 'http://192.0.2.7:8080'],
      {},
      /in clear across the network: use https:\/\/ .* or pass --follow-insecure/,
    ],
    [['--follow', 'http://primary.example.net'], {}, /--follow-insecure/],
    // Serving plain HTTP behind a proxy says nothing about following across the network.
    [['--follow', 'http://192.0.2.7:8080', '--insecure-http'], {}, /--follow-insecure/],
    [['--follow', 'http://127.0.0.1:8080'], { MASTER_FOLLOW_PIN: pin }, /give --follow as https:\/\//],
    [['--follow', 'https://192.0.2.7:8080'], { MASTER_FOLLOW_TOKEN: '' }, /needs MASTER_FOLLOW_TOKEN/],
  ];
  for (const [argv, env, want] of refused) {
    const result = follows(argv, env) as { error?: string };
    assert.ok(result.error && want.test(result.error), `${argv.join(' ')} -> ${JSON.stringify(result)}`);
  }
});

test('masters elected through etcd: its members, a prefix, TLS to it, and the address each publishes', () => {
  const token = 'mst_' + 'b'.repeat(40);
  const etcdOf = (argv: string[], env: Record<string, string> = {}) => {
    const result = parseConfig(argv, env);
    return 'config' in result ? result.config.etcd : result;
  };
  const base = {
    endpoints: ['http://127.0.0.1:2379', 'http://[::1]:2379'],
    prefix: '/portplane',
    caPath: null,
    certPath: null,
    keyPath: null,
    advertise: 'https://192.0.2.1:8443',
    token: null,
    followInsecure: false,
  };
  const given = ['--etcd', 'http://127.0.0.1:2379,http://[::1]:2379', '--advertise', 'https://192.0.2.1:8443'];
  assert.deepEqual(etcdOf(given), base);
  assert.deepEqual(
    etcdOf(['--etcd', 'https://etcd1.example:2379,https://etcd2.example:2379', '--etcd-prefix', '/prod/pp'], {
      MASTER_ADVERTISE: 'https://192.0.2.1:8443',
      MASTER_ETCD_CA: '/etc/pp/ca.pem',
      MASTER_ETCD_CERT: '/etc/pp/c.pem',
      MASTER_ETCD_KEY: '/etc/pp/k.pem',
      MASTER_FOLLOW_TOKEN: token,
    }),
    {
      ...base,
      endpoints: ['https://etcd1.example:2379', 'https://etcd2.example:2379'],
      prefix: '/prod/pp',
      caPath: '/etc/pp/ca.pem',
      certPath: '/etc/pp/c.pem',
      keyPath: '/etc/pp/k.pem',
      token,
    },
  );
  const refused: [string[], Record<string, string>, RegExp][] = [
    [['--etcd', 'http://127.0.0.1:2379'], {}, /--etcd needs --advertise/],
    [['--advertise', 'https://192.0.2.1:8443'], {}, /--advertise goes with --etcd/],
    [['--etcd', 'http://etcd.example:2379', '--advertise', 'https://a:1'], {}, /over TLS: give https:\/\//],
    [[...given, '--etcd-prefix', 'portplane'], {}, /--etcd-prefix must be a key path/],
    [[...given, '--etcd-prefix', '/pp/'], {}, /--etcd-prefix must be a key path/],
    [[...given, '--etcd-cert', '/c.pem'], {}, /--etcd-cert and --etcd-key go together/],
    [[...given], { MASTER_FOLLOW_TOKEN: 'secret' }, /MASTER_FOLLOW_TOKEN must be a token/],
    [[...given, '--follow', 'http://127.0.0.1:8080'], { MASTER_FOLLOW_TOKEN: token }, /contradict/],
    [['--etcd', 'etcd:2379', '--advertise', 'https://a:1'], {}, /http\(s\):\/\/HOST:PORT/],
  ];
  for (const [argv, env, want] of refused) {
    const result = etcdOf(argv, env) as { error?: string };
    assert.ok(result.error && want.test(result.error), `${argv.join(' ')} -> ${JSON.stringify(result)}`);
  }
});

test('configuration errors say what is wrong', () => {
  const cases: [string[], Record<string, string>, RegExp][] = [
    [['--listen', 'localhost'], {}, /HOST:PORT/],
    [['--listen', '1.2.3.4:70000'], {}, /HOST:PORT/],
    [['--listen'], {}, /needs a value/],
    [['--port', '1'], {}, /unknown option/],
    [[], { MASTER_ADMIN_PASSWORD: 'short' }, /at least 10/],
    [['--tls-cert', 'c.pem'], {}, /--tls-cert and --tls-key go together/],
    [['--tls-cert', 'c.pem', '--tls-key', 'k.pem', '--insecure-http'], {}, /contradict/],
  ];
  for (const [argv, env, want] of cases) {
    const result = parseConfig(argv, env);
    assert.ok('error' in result && want.test(result.error), `${argv.join(' ')} -> ${JSON.stringify(result)}`);
  }
  assert.deepEqual(parseConfig(['--help'], {}), { exit: 'help' });
  assert.deepEqual(parseConfig(['--version'], {}), { exit: 'version' });
});

test(
  'agent configuration: flags over AGENT_* environment; the token, URL and pin are checked; ' +
    'plain HTTP only on this machine unless told',
  async () => {
    const { parseAgentConfig } = await import('../../cmd/agent/config.ts');
    const token = `mat_7_${'a'.repeat(43)}`;
    const pin = `sha256/${'Q'.repeat(43)}=`;
    const cores = Math.min(availableParallelism(), 4);
    const base = {
      masterPin: null,
      token,
      stateDir: './agent-state',
      listenHost: '0.0.0.0',
      forwarding: 'auto',
      resolveSeconds: 60,
      releaseKeys: [],
      drainSeconds: 60,
      relayWorkers: cores,
      otherMasters: [],
    };
    const cases: [string[], Record<string, string>, Record<string, unknown>][] = [
      [
        ['--master', 'https://10.0.0.1:8443/', '--master-pin', pin],
        { AGENT_TOKEN: token },
        { ...base, masterUrl: 'https://10.0.0.1:8443', masterPin: pin },
      ],
      [
        ['--state-dir=/var/lib/pp', '--listen-host', '::'],
        { AGENT_MASTER_URL: 'https://m.example', AGENT_TOKEN: token },
        { ...base, masterUrl: 'https://m.example', stateDir: '/var/lib/pp', listenHost: '::' },
      ],
      [['--master', 'http://127.0.0.1:8080'], { AGENT_TOKEN: token }, { ...base, masterUrl: 'http://127.0.0.1:8080' }],
      [['--master', 'http://[::1]:8080'], { AGENT_TOKEN: token }, { ...base, masterUrl: 'http://[::1]:8080' }],
      [
        ['--master', 'http://10.0.0.1:8080', '--insecure-http'],
        { AGENT_TOKEN: token },
        { ...base, masterUrl: 'http://10.0.0.1:8080' },
      ],
      [
        ['--master', 'http://10.0.0.1:8080'],
        { AGENT_TOKEN: token, AGENT_INSECURE_HTTP: 'true' },
        { ...base, masterUrl: 'http://10.0.0.1:8080' },
      ],
      [
        ['--master', 'https://m.example', '--forwarding', 'kernel'],
        { AGENT_TOKEN: token, AGENT_FORWARDING: 'relay' },
        { ...base, masterUrl: 'https://m.example', forwarding: 'kernel' },
      ],
      [
        ['--master', 'https://m.example'],
        { AGENT_TOKEN: token, AGENT_FORWARDING: 'relay' },
        { ...base, masterUrl: 'https://m.example', forwarding: 'relay' },
      ],
      [
        ['--master', 'https://m.example', '--relay-workers', '6'],
        { AGENT_TOKEN: token, AGENT_RELAY_WORKERS: '2' },
        { ...base, masterUrl: 'https://m.example', relayWorkers: 6 },
      ],
      [
        ['--master', 'https://m.example'],
        { AGENT_TOKEN: token, AGENT_RELAY_WORKERS: '1' },
        { ...base, masterUrl: 'https://m.example', relayWorkers: 1 },
      ],
    ];
    for (const [argv, env, want] of cases)
      assert.deepEqual(parseAgentConfig(argv, env), { config: want }, argv.join(' '));
    const errors: [string[], Record<string, string>, RegExp][] = [
      [[], { AGENT_TOKEN: token }, /--master/],
      [['--master', 'https://m', '--forwarding', 'fast'], { AGENT_TOKEN: token }, /--forwarding must be auto, kernel/],
      [['--master', 'https://m', '--resolve-every', '0.5'], { AGENT_TOKEN: token }, /--resolve-every must be whole/],
      [['--master', 'not a url'], { AGENT_TOKEN: token }, /must be http\(s\):\/\/HOST/],
      [['--master', 'http://10.0.0.1:8080/a/path'], { AGENT_TOKEN: token }, /must be http\(s\):\/\/HOST/],
      [['--master', 'http://a$(reboot)b:8080'], { AGENT_TOKEN: token }, /must be http\(s\):\/\/HOST/],
      [['--master', 'http://10.0.0.1:8080'], { AGENT_TOKEN: token }, /in clear.*https:\/\/.*--insecure-http/],
      [
        ['--master', 'http://127.0.0.1:8080', '--master-pin', pin],
        { AGENT_TOKEN: token },
        /pins a TLS key: give the master as https/,
      ],
      [
        ['--master', 'https://m', '--master-pin', 'sha256/short'],
        { AGENT_TOKEN: token },
        /--master-pin must be sha256/,
      ],
      [['--master', 'http://localhost'], {}, /agent token/],
      [['--master', 'http://localhost', '--token', 'mst_abc'], {}, /agent token/],
      [['--master', 'http://localhost', '--bogus'], { AGENT_TOKEN: token }, /unknown option/],
      ...['0', '65', '1.5', 'four', '-2'].map((workers): [string[], Record<string, string>, RegExp] => [
        ['--master', 'http://localhost', '--relay-workers', workers],
        { AGENT_TOKEN: token },
        /--relay-workers must be a whole number from 1 to 64/,
      ]),
    ];
    for (const [argv, env, want] of errors) {
      const result = parseAgentConfig(argv, env);
      assert.ok('error' in result && want.test(result.error), `${argv.join(' ')} -> ${JSON.stringify(result)}`);
    }
  },
);

test(
  'agent env files are data: each line KEY=VALUE taken literally, never through a shell; ' +
    'flags win over the file, the file over the environment',
  async () => {
    const { parseAgentConfig, parseEnvFile } = await import('../../cmd/agent/config.ts');
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
      config: {
        masterUrl: 'https://m.example:8443',
        masterPin: null,
        token,
        stateDir: './agent-state',
        listenHost: '0.0.0.0',
        forwarding: 'auto',
        resolveSeconds: 60,
        releaseKeys: [],
        drainSeconds: 60,
        relayWorkers: Math.min(availableParallelism(), 4),
        otherMasters: [],
      },
    });
    assert.deepEqual(parseAgentConfig(['--env-file', '/etc/good.env', '--master', 'http://localhost'], {}, read), {
      config: {
        masterUrl: 'http://localhost',
        masterPin: null,
        token,
        stateDir: './agent-state',
        listenHost: '0.0.0.0',
        forwarding: 'auto',
        resolveSeconds: 60,
        releaseKeys: [],
        drainSeconds: 60,
        relayWorkers: Math.min(availableParallelism(), 4),
        otherMasters: [],
      },
    });
    assert.deepEqual(parseAgentConfig([], { AGENT_ENV_FILE: '/etc/good.env' }, read), {
      config: {
        masterUrl: 'https://m.example:8443',
        masterPin: null,
        token,
        stateDir: './agent-state',
        listenHost: '0.0.0.0',
        forwarding: 'auto',
        resolveSeconds: 60,
        releaseKeys: [],
        drainSeconds: 60,
        relayWorkers: Math.min(availableParallelism(), 4),
        otherMasters: [],
      },
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
    assert.deepEqual(parseEnvFile("AGENT_TOKEN=a=b c 'd' `e`\n"), { AGENT_TOKEN: "a=b c 'd' `e`" });
  },
);

test(
  'master URLs are http(s), a hostname or IP address, and an optional port: nothing a shell ' +
    'or parser could read as syntax',
  async () => {
    const { masterOrigin } = await import('../../internal/schema/net.ts');
    const good: [string, string][] = [
      ['http://192.0.2.1:8080', 'http://192.0.2.1:8080'],
      ['https://Master.Example.net/', 'https://master.example.net'],
      ['https://[2001:db8::1]:8443', 'https://[2001:db8::1]:8443'],
      ['http://localhost', 'http://localhost'],
    ];
    for (const [input, want] of good) assert.equal(masterOrigin(input), want, input);
    const hostile = [
      'http://a$(reboot)b:8080',
      'http://a;reboot:8080',
      'http://a`id`:1',
      'http://a&b',
      'http://a|b',
      "http://a'b",
      'http://a"b',
      'http://a b',
      'http://user:pw@host',
      'http://host/path',
      'http://host?x',
      'http://host#x',
      'ftp://host',
      'http://host:0',
      'http://host:65536',
      'http://[zz::1]',
      'http://host\nAGENT_TOKEN=x',
      'http://-host',
      'http://host:8080 --evil',
      '',
    ];
    for (const input of hostile) assert.equal(masterOrigin(input), null, JSON.stringify(input));
  },
);
