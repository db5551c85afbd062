// The route table: every route of the admin API with its required scope. The router, the
// scope check, the API reference and the scope tests all read this one list.

import { auditRoutes } from './audit.ts';
import { authRoutes } from './auth.ts';
import { licenseRoutes } from './license.ts';
import type { Route } from './route.ts';
import { settingsRoutes } from './settings.ts';
import { tokenRoutes } from './tokens.ts';
import { userRoutes } from './users.ts';

export const routes: readonly Route[] = [
  ...authRoutes,
  ...tokenRoutes,
  ...userRoutes,
  ...settingsRoutes,
  ...auditRoutes,
  ...licenseRoutes,
];
