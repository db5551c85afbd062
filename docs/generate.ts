// Writes docs/api.md from docs/api.intro.md and the route table, and docs/openapi.json, the document the master
// serves at /api/openapi.json, for the linters of `npm run check` and for clients generated without a master
// (npm run docs), and the console's types (web/src/api.gen.ts).

import { readFileSync, writeFileSync } from 'node:fs';
import { openApiDocument } from '../internal/api/openapi.ts';
import { renderReference } from '../internal/api/reference.ts';
import { routes } from '../internal/api/routes.ts';
import { CONSOLE_TYPES, consoleTypes } from './console-types.ts';

const document = openApiDocument(routes);
writeFileSync('docs/api.md', renderReference(routes, readFileSync('docs/api.intro.md', 'utf8')));
writeFileSync('docs/openapi.json', `${JSON.stringify(document, null, 2)}\n`);
writeFileSync(CONSOLE_TYPES, await consoleTypes(document as never));
console.log(`wrote docs/api.md, docs/openapi.json and ${CONSOLE_TYPES}`);
