// The layout rules CI holds the tree to, besides `prettier --check` in `npm run check`.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
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
