// Writes docs/api.md from docs/api.intro.md and the route table, and docs/openapi.json, the document the master
// serves at /api/openapi.json, for the linters of `npm run check` and for clients generated without a master
// (npm run docs).

import { readFileSync, writeFileSync } from 'node:fs';
import { openApiDocument } from '../internal/api/openapi.ts';
import { renderReference } from '../internal/api/reference.ts';
import { routes } from '../internal/api/routes.ts';

writeFileSync('docs/api.md', renderReference(routes, readFileSync('docs/api.intro.md', 'utf8')));
writeFileSync('docs/openapi.json', `${JSON.stringify(openApiDocument(routes), null, 2)}\n`);
console.log('wrote docs/api.md and docs/openapi.json');
