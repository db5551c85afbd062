// The layout rules CI holds the tree to, besides `prettier --check` in `npm run check`.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';

const MAX_COLUMNS = 120;
// Released migrations are frozen text: never reflowed, so exempt.
const FROZEN = new Set(['internal/store/migrations.ts']);

test(`no source line is longer than ${MAX_COLUMNS} columns`, () => {
  const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '*.ts', '*.mjs'], {
    encoding: 'utf8',
  })
    .split('\n')
    .filter((file) => file && !FROZEN.has(file));
  assert.ok(files.length > 50, 'the files were found');
  const long = files.flatMap((file) =>
    readFileSync(file, 'utf8')
      .split('\n')
      .flatMap((line, i) => (line.length > MAX_COLUMNS ? [`${file}:${i + 1} (${line.length})`] : [])),
  );
  assert.deepEqual(long, []);
});

/** Which areas of internal/ each area imports (an area is the folder right under internal/). */
function areaImports(): Map<string, Set<string>> {
  const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', 'internal/*.ts'], {
    encoding: 'utf8',
  })
    .split('\n')
    .filter(Boolean);
  const areaOf = (path: string) => (path.split('/').length > 2 ? path.split('/')[1]! : 'root');
  const edges = new Map<string, Set<string>>();
  for (const file of files) {
    const from = areaOf(file);
    for (const [, spec] of readFileSync(file, 'utf8').matchAll(/from '(\.\.?\/[^']+)'/g)) {
      const to = areaOf(join(dirname(file), spec!));
      if (to !== from) (edges.get(from) ?? edges.set(from, new Set()).get(from)!).add(to);
    }
  }
  return edges;
}

test('dependencies point one way: no cycle between areas, storage and the data plane know no HTTP', () => {
  const edges = areaImports();
  assert.ok(edges.size > 10, 'the areas were found');
  const cycles: string[] = [];
  const state = new Map<string, 'open' | 'done'>();
  const visit = (area: string, path: string[]) => {
    state.set(area, 'open');
    for (const next of edges.get(area) ?? []) {
      if (state.get(next) === 'open') cycles.push([...path.slice(path.indexOf(next)), next].join(' -> '));
      else if (!state.has(next)) visit(next, [...path, next]);
    }
    state.set(area, 'done');
  };
  for (const area of edges.keys()) if (!state.has(area)) visit(area, [area]);
  assert.deepEqual(cycles, []);
  const forbidden: [string, string[]][] = [
    ['store', ['api', 'service', 'http', 'agentlink']],
    ['service', ['api', 'agentlink', 'http']],
    ['domain', ['store', 'service', 'api', 'http']],
    ['relay', ['forward', 'tunnel', 'store', 'api', 'http']],
    ['tunnel', ['forward', 'store', 'api', 'http']],
    ['forward', ['store', 'api', 'http']],
    ['agent', ['store', 'api', 'http']],
  ];
  for (const [area, never] of forbidden)
    for (const other of never) assert.ok(!edges.get(area)?.has(other), `internal/${area} imports internal/${other}`);
  const apiUsers = [...edges].filter(([, to]) => to.has('api')).map(([from]) => from);
  assert.deepEqual(apiUsers, [], 'nothing but cmd/ imports internal/api');
  // And in cmd/, only what wires the server: the operations are reached through internal/service.
  const cmdFiles = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', 'cmd/*.ts'], {
    encoding: 'utf8',
  })
    .split('\n')
    .filter(Boolean);
  const wiringApi = cmdFiles.filter((file) => /from '[./]*internal\/api\//.test(readFileSync(file, 'utf8')));
  assert.deepEqual(wiringApi.sort(), ['cmd/master/elected.ts', 'cmd/master/start.ts', 'cmd/master/workers.ts']);
});

/** The files under `dir` that import a value (not only types) from internal/`area`. */
function valueImporters(dir: string, area: string): string[] {
  const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', `${dir}*.ts`], {
    encoding: 'utf8',
  })
    .split('\n')
    .filter(Boolean);
  return files.filter((file) =>
    [...readFileSync(file, 'utf8').matchAll(/^import (type )?([^;]*?) from '(\.\.?\/[^']+)'/gms)].some(
      ([, typeOnly, names, spec]) => {
        if (typeOnly || !join(dirname(file), spec!).startsWith(`internal/${area}/`)) return false;
        const inBraces = /^\{([^}]*)\}$/s.exec(names!.trim());
        if (!inBraces) return true;
        const specifiers = inBraces[1]!
          .split(',')
          .map((name) => name.trim())
          .filter(Boolean);
        return specifiers.some((name) => !name.startsWith('type '));
      },
    ),
  );
}

test('the agent link and the API go through the service: they take only types from the store', () => {
  assert.ok(valueImporters('internal/service/', 'store').length > 0, 'value imports are seen');
  assert.deepEqual(valueImporters('internal/agentlink/', 'store'), []);
  assert.deepEqual(valueImporters('internal/api/', 'store'), []);
});

/** The circles of imports between the files of `dir` (a type import counts: it is a dependency of the text). */
function fileCircles(dir: string): string[] {
  const files = readdirSync(dir).filter((file) => file.endsWith('.ts'));
  const edges = new Map(
    files.map((file) => [
      file,
      [...readFileSync(join(dir, file), 'utf8').matchAll(/from '\.\/([^']+)'/g)].map(([, spec]) => spec!),
    ]),
  );
  const circles: string[] = [];
  const state = new Map<string, 'open' | 'done'>();
  const visit = (file: string, path: string[]) => {
    state.set(file, 'open');
    for (const next of edges.get(file) ?? []) {
      if (state.get(next) === 'open') circles.push([...path.slice(path.indexOf(next)), next].join(' -> '));
      else if (!state.has(next)) visit(next, [...path, next]);
    }
    state.set(file, 'done');
  };
  for (const file of files) if (!state.has(file)) visit(file, [file]);
  return circles;
}

test('the store has no circle between its files: the connection and commits are handed what is above', () => {
  assert.ok(readdirSync('internal/store').length > 20, 'the files were found');
  assert.deepEqual(fileCircles('internal/store'), []);
});

test("SQL is the store's alone: nothing else opens SQLite or prepares a statement", () => {
  const files = execFileSync(
    'git',
    ['ls-files', '--cached', '--others', '--exclude-standard', 'internal/*.ts', 'cmd/*.ts'],
    {
      encoding: 'utf8',
    },
  )
    .split('\n')
    .filter((file) => file && !file.startsWith('internal/store/'));
  const sql = files.filter((file) =>
    /'node:sqlite'|DatabaseSync|\.prepare\(|\bPRAGMA\b/.test(readFileSync(file, 'utf8')),
  );
  // The checkpoint thread's one PRAGMA: that thread loads nothing of the master's, which keeps 20 MiB off its RSS.
  assert.deepEqual(sql, ['cmd/master/workers.ts']);
  assert.equal(readFileSync('cmd/master/workers.ts', 'utf8').match(/\bPRAGMA\b|\.prepare\(/g)?.length, 1);
});

const MAX_API_LINES = 400;

test(`no file of the API layer is over ${MAX_API_LINES} lines: schemas and handlers, the rest in the service`, () => {
  const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', 'internal/api/'], {
    encoding: 'utf8',
  })
    .split('\n')
    .filter(Boolean);
  const long = files.flatMap((file) => {
    const lines = readFileSync(file, 'utf8').split('\n').length - 1;
    return lines > MAX_API_LINES ? [`${file} (${lines})`] : [];
  });
  assert.deepEqual(long, []);
});
