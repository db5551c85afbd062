// The route table: every route of the admin API with its required scope. The router, the
// scope check, the API reference and the scope tests all read this one list.

import { auditRoutes } from './audit.ts';
import { batchRoutes } from './batch.ts';
import { dashboardRoutes } from './dashboard.ts';
import { authRoutes } from './auth.ts';
import { installRoutes } from './install.ts';
import { licenseRoutes } from './license.ts';
import { nodeRoutes } from './nodes.ts';
import { describe } from '../schema/schema.ts';
import { openApiDocument } from './openapi.ts';
import { ruleRoutes } from './rules.ts';
import { ok, route, type Route } from './route.ts';
import { settingsRoutes } from './settings.ts';
import { tokenRoutes } from './tokens.ts';
import { transferRoutes } from './transfer.ts';
import { tunnelRoutes } from './tunnels.ts';
import { userRoutes } from './users.ts';

export const routes: readonly Route[] = [
  ...authRoutes,
  ...tokenRoutes,
  ...userRoutes,
  ...settingsRoutes,
  ...auditRoutes,
  ...licenseRoutes,
  ...nodeRoutes,
  ...installRoutes,
  ...ruleRoutes,
  ...tunnelRoutes,
  ...batchRoutes,
  ...dashboardRoutes,
  ...transferRoutes,
  route({
    method: 'GET',
    path: '/api/openapi.json',
    scope: 'public',
    summary: 'This API as an OpenAPI 3.1 document, generated from the route table',
    responses: { 200: { description: 'The OpenAPI document', schema: describe({ type: 'object', required: ['openapi', 'info', 'paths', 'components'] }) } },
    handler: () => ok((document ??= openApiDocument(routes))),
  }),
];

let document: unknown;
