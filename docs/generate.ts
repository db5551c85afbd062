// Writes docs/api.md from docs/api.intro.md and the route table (npm run docs).

import { readFileSync, writeFileSync } from 'node:fs';
import { renderReference } from '../internal/api/reference.ts';
import { routes } from '../internal/api/routes.ts';

writeFileSync('docs/api.md', renderReference(routes, readFileSync('docs/api.intro.md', 'utf8')));
console.log('wrote docs/api.md');
