import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { openApiDocument } from '../internal/api/openapi.ts';
import { renderReference } from '../internal/api/reference.ts';
import { CONSOLE_TYPES, consoleTypes } from '../docs/console-types.ts';
import { inlineRefs } from './json-schema.ts';
import { routes } from '../internal/api/routes.ts';
import { call, startMaster } from './helpers.ts';

test('docs/api.md is generated from the route table and up to date (npm run docs)', () => {
  const want = renderReference(routes, readFileSync('docs/api.intro.md', 'utf8'));
  assert.equal(readFileSync('docs/api.md', 'utf8'), want, 'docs/api.md is stale: run npm run docs');
});

test('docs/openapi.json, which npm run check lints, is the document the master serves (npm run docs)', async (t) => {
  const m = await startMaster(t);
  const served = await call(m.url, 'GET', '/api/openapi.json');
  assert.deepEqual(JSON.parse(readFileSync('docs/openapi.json', 'utf8')), served.body, 'stale: run npm run docs');
});

test("the console's types (web/src/api.gen.ts) are made from the API document, up to date (npm run docs)", async () => {
  const want = await consoleTypes(openApiDocument(routes) as never);
  assert.equal(readFileSync(CONSOLE_TYPES, 'utf8'), want, `${CONSOLE_TYPES} is stale: run npm run docs`);
});

test('the OpenAPI document is public and lists every route with its scope and bearer security', async (t) => {
  const m = await startMaster(t);
  const answer = await call(m.url, 'GET', '/api/openapi.json');
  assert.equal(answer.status, 200);
  const doc = answer.body;
  assert.equal(doc.openapi, '3.1.0');
  assert.deepEqual(doc.components.securitySchemes.bearer, {
    type: 'http',
    scheme: 'bearer',
    description: doc.components.securitySchemes.bearer.description,
  });
  const operationIds = new Set<string>();
  for (const r of routes) {
    const op = doc.paths[r.path]?.[r.method.toLowerCase()];
    assert.ok(op, `${r.method} ${r.path} is missing`);
    assert.equal(op['x-scope'], r.scope);
    assert.deepEqual(op.security, r.scope === 'public' ? [] : [{ bearer: [] }]);
    assert.ok(!operationIds.has(op.operationId), `duplicate operationId ${op.operationId}`);
    operationIds.add(op.operationId);
    if (r.body) assert.deepEqual(inlineRefs(op.requestBody.content['application/json'].schema, doc), r.body.json);
  }
});
