// The route table: every route of the admin API on one line, with the scope it needs (and
// any it needs besides, for side effects) and the operation that answers it. The router, the
// scope check, the OpenAPI document, the API reference and the scope tests all read this list.

import { alertRuleOperations as alerts } from './alert-rules.ts';
import { channelOperations as channels } from './channels.ts';
import { silenceOperations as silences } from './silences.ts';
import { auditOperations as audit } from './audit.ts';
import { backupOperations as backup } from './backup.ts';
import { authOperations as auth } from './auth.ts';
import { providerSignInOperations as provider } from './oidc.ts';
import { passkeyOperations as passkeys } from './passkeys.ts';
import { liveOperations as live } from './live.ts';
import { nodeExportOperations as nodeExport } from './node-export.ts';
import { secondFactorOperations as factor } from './second-factor.ts';
import { loginSessionOperations as sessions } from './login-sessions.ts';
import { batchOperations as batch } from './batch.ts';
import { bundleOperations as bundles } from './bundles.ts';
import { rolloutOperations as rollouts } from './rollouts.ts';
import { replicationOperations as replication } from './replication.ts';
import { dashboardOperations as dashboard } from './dashboard.ts';
import { eventOperations as events } from './events.ts';
import { healthOperations as health } from './health.ts';
import { INSTALL_ELSEWHERE } from './dial.ts';
import { installOperations as install } from './install.ts';
import { licenseOperations as license } from './license.ts';
import { CASCADE_FROM_NODE, nodeOperations as nodes } from './nodes.ts';
import { openApiDocument } from './openapi.ts';
import { operation, ok, route, type Route } from './route.ts';
import { planOperations as plans } from './plans.ts';
import { probeOperations as probe } from './probe.ts';
import { ruleOperations as rules } from './rules.ts';
import { GUARDED_SETTINGS, settingsOperations as settings } from './settings.ts';
import { tokenOperations as tokens } from './tokens.ts';
import { transferOperations as transfer } from './transfer.ts';
import { CASCADE_FROM_TUNNEL, CHANGE_TUNNEL, tunnelOperations as tunnels } from './tunnels.ts';
import { userOperations as users } from './users.ts';
import { describe } from '../schema/schema.ts';
import { GIVE_TO_ANOTHER, HAND_OVER } from './common.ts';

const openapi = operation({
  operationId: 'getOpenApi',
  summary: 'This API as an OpenAPI 3.1 document, generated from the route table',
  responses: {
    200: {
      description: 'The OpenAPI document',
      schema: describe({
        type: 'object',
        required: ['openapi', 'info', 'paths', 'components'],
        properties: {
          openapi: { type: 'string' },
          info: { type: 'object' },
          paths: { type: 'object' },
          components: { type: 'object' },
        },
      }),
    },
  },
  handler: () => ok((document ??= openApiDocument(routes))),
});

// prettier-ignore
export const routes: readonly Route[] = [
  route('POST',   '/api/auth/login',              'public',          auth.logIn),
  route('GET',    '/api/auth/methods',            'public',          provider.listSignInMethods),
  route('GET',    '/api/auth/oidc/login',         'public',          provider.beginProviderSignIn),
  route('GET',    '/api/auth/oidc/callback',      'public',          provider.finishProviderSignIn),
  route('POST',   '/api/auth/oidc/session',       'public',          provider.takeProviderSession),
  route('POST',   '/api/auth/passkeys/options',   'session',         passkeys.beginPasskeyRegistration),
  route('POST',   '/api/auth/passkeys',           'session',         passkeys.createPasskey),
  route('GET',    '/api/auth/passkeys',           'session',         passkeys.listPasskeys),
  route('PATCH',  '/api/auth/passkeys/{id}',      'session',         passkeys.renamePasskey),
  route('DELETE', '/api/auth/passkeys/{id}',      'session',         passkeys.deletePasskey),
  route('POST',   '/api/auth/passkeys/sign-in/options', 'public',    passkeys.beginPasskeySignIn),
  route('POST',   '/api/auth/passkeys/sign-in',   'public',          passkeys.signInWithPasskey),
  route('GET',    '/api/auth/me',                 'authenticated',   auth.getMe),
  route('POST',   '/api/auth/logout',             'authenticated',   auth.logOut),
  route('POST',   '/api/auth/password',           'session',         auth.changePassword),
  route('POST',   '/api/auth/logout-others',      'session',         auth.endOtherSessions),
  route('POST',   '/api/auth/totp',               'session',         factor.beginTotp),
  route('POST',   '/api/auth/totp/confirm',       'session',         factor.confirmTotp),
  route('POST',   '/api/auth/totp/disable',       'session',         factor.disableTotp),
  route('GET',    '/api/auth/sessions',           'session',         sessions.listOwnSessions),
  route('DELETE', '/api/auth/sessions/{id}',      'session',         sessions.endOwnSession),
  route('GET',    '/api/tokens',                  'tokens:read',     tokens.listTokens),
  route('POST',   '/api/tokens',                  'tokens:write',    tokens.createToken),
  route('GET',    '/api/tokens/{id}',             'tokens:read',     tokens.getToken),
  route('DELETE', '/api/tokens/{id}',             'tokens:write',    tokens.deleteToken),
  route('GET',    '/api/users',                   'users:read',      users.listUsers),
  route('POST',   '/api/users',                   'users:write',     users.createUser),
  route('GET',    '/api/users/{id}',              'users:read',      users.getUser),
  route('PUT',    '/api/users/{id}',              'users:write',     users.replaceUser),
  route('DELETE', '/api/users/{id}',              'users:write',     users.deleteUser),
  route('DELETE', '/api/users/{id}/totp',         'users:write',     factor.removeUserTotp),
  route('GET',    '/api/users/{id}/sessions',     'users:write',     sessions.listUserSessions),
  route('DELETE', '/api/users/{id}/sessions',     'users:write',     sessions.endUserSessions),
  route('GET',    '/api/users/{id}/passkeys',     'users:write',     passkeys.listUserPasskeys),
  route('DELETE', '/api/users/{id}/passkeys',     'users:write',     passkeys.removeUserPasskeys),
  route('GET',    '/api/plans',                   'users:read',      plans.listPlans),
  route('POST',   '/api/plans',                   'users:write',     plans.createPlan),
  route('GET',    '/api/plans/{id}',              'users:read',      plans.getPlan),
  route('PUT',    '/api/plans/{id}',              'users:write',     plans.replacePlan),
  route('DELETE', '/api/plans/{id}',              'users:write',     plans.deletePlan),
  route('GET',    '/api/settings',                'settings:read',   settings.getSettings),
  route('PATCH',  '/api/settings',                'settings:write',  settings.updateSettings, GUARDED_SETTINGS),
  route('GET',    '/api/audit-logs',              'audit:read',      audit.listAuditLogs),
  route('GET',    '/api/events',                  'authenticated',   events.watchEvents),
  route('GET',    '/api/license',                 'license:read',    license.getLicense),
  route('GET',    '/api/nodes',                   'nodes:read',      nodes.listNodes),
  route('POST',   '/api/nodes',                   'nodes:write',     nodes.createNode),
  route('GET',    '/api/nodes/{id}',              'nodes:read',      nodes.getNode),
  route('GET',    '/api/nodes/{id}/vitals',       'nodes:read',      nodes.getNodeVitals),
  route('GET',    '/api/nodes/{id}/export',       'rules:read',      nodeExport.exportNode),
  route('PUT',    '/api/nodes/{id}',              'nodes:write',     nodes.replaceNode),
  route('DELETE', '/api/nodes/{id}',              'nodes:write',     nodes.deleteNode, CASCADE_FROM_NODE),
  route('POST',   '/api/nodes/{id}/install-ssh',  'nodes:write',     install.installNode, INSTALL_ELSEWHERE),
  route('POST',   '/api/nodes/{id}/reinstall',    'nodes:write',     install.reinstallNode, INSTALL_ELSEWHERE),
  route('POST',   '/api/nodes/{id}/probe',        'nodes:write',     probe.probeNode),
  route('GET',    '/api/live',                   'rules:read',      live.listLive),
  route('GET',    '/api/rules',                   'rules:read',      rules.listRules),
  route('POST',   '/api/rules',                   'rules:write',     rules.createRule, GIVE_TO_ANOTHER),
  route('GET',    '/api/rules/{id}',              'rules:read',      rules.getRule),
  route('PUT',    '/api/rules/{id}',              'rules:write',     rules.replaceRule, GIVE_TO_ANOTHER),
  route('DELETE', '/api/rules/{id}',              'rules:write',     rules.deleteRule),
  route('POST',   '/api/rules/{id}/sync',         'rules:write',     rules.syncRule),
  route('POST',   '/api/rules/{id}/check',        'rules:write',     probe.checkRule),
  route('GET',    '/api/tunnels',                 'tunnels:read',    tunnels.listTunnels),
  route('POST',   '/api/tunnels',                 'tunnels:write',   tunnels.createTunnel, GIVE_TO_ANOTHER),
  route('GET',    '/api/tunnels/{id}',            'tunnels:read',    tunnels.getTunnel),
  route('GET',    '/api/tunnels/{id}/paths',      'tunnels:read',    tunnels.getTunnelPaths),
  route('PUT',    '/api/tunnels/{id}',            'tunnels:write',   tunnels.replaceTunnel, CHANGE_TUNNEL),
  route('DELETE', '/api/tunnels/{id}',            'tunnels:write',   tunnels.deleteTunnel, CASCADE_FROM_TUNNEL),
  route('POST',   '/api/nodes/batch-delete',      'nodes:write',     batch.deleteNodes, CASCADE_FROM_NODE),
  route('POST',   '/api/rules/batch-delete',      'rules:write',     batch.deleteRules),
  route('POST',   '/api/tunnels/batch-delete',    'tunnels:write',   batch.deleteTunnels, CASCADE_FROM_TUNNEL),
  route('POST',   '/api/rules/batch-create',      'rules:write',     batch.createRules, GIVE_TO_ANOTHER),
  route('POST',   '/api/rules/batch-update',      'rules:write',     batch.updateRules, HAND_OVER),
  route('POST',   '/api/rules/batch-sync',        'rules:write',     batch.syncRules),
  route('GET',    '/api/channels',                'alerts:read',     channels.listChannels),
  route('POST',   '/api/channels',                'alerts:write',    channels.createChannel),
  route('GET',    '/api/channels/{id}',           'alerts:read',     channels.getChannel),
  route('PUT',    '/api/channels/{id}',           'alerts:write',    channels.replaceChannel),
  route('DELETE', '/api/channels/{id}',           'alerts:write',    channels.deleteChannel),
  route('POST',   '/api/channels/{id}/test',      'alerts:write',    channels.testChannel),
  route('GET',    '/api/alert-rules',             'alerts:read',     alerts.listAlertRules),
  route('POST',   '/api/alert-rules',             'alerts:write',    alerts.createAlertRule),
  route('GET',    '/api/alert-rules/{id}',        'alerts:read',     alerts.getAlertRule),
  route('PUT',    '/api/alert-rules/{id}',        'alerts:write',    alerts.replaceAlertRule),
  route('DELETE', '/api/alert-rules/{id}',        'alerts:write',    alerts.deleteAlertRule),
  route('GET',    '/api/alerts',                  'alerts:read',     alerts.listAlerts),
  route('GET',    '/api/deliveries',              'alerts:read',     channels.listDeliveries),
  route('GET',    '/api/silences',                'alerts:read',     silences.listSilences),
  route('POST',   '/api/silences',                'alerts:write',    silences.createSilence),
  route('GET',    '/api/silences/{id}',           'alerts:read',     silences.getSilence),
  route('PUT',    '/api/silences/{id}',           'alerts:write',    silences.replaceSilence),
  route('DELETE', '/api/silences/{id}',           'alerts:write',    silences.deleteSilence),
  route('GET',    '/api/dashboard',               'dashboard:read',  dashboard.getDashboard),
  route('GET',    '/api/dashboard/traffic',       'dashboard:read',  dashboard.getTraffic),
  route('GET',    '/api/dashboard/busiest',       'rules:read',      live.busiestToday),
  route('GET',    '/api/agent-bundles',           'nodes:read',      bundles.listBundles),
  route('POST',   '/api/agent-bundles',           '*',               bundles.createBundle),
  route('DELETE', '/api/agent-bundles/{id}',      '*',               bundles.deleteBundle),
  route('GET',    '/api/rollouts',                'nodes:read',      rollouts.listRollouts),
  route('POST',   '/api/rollouts',                'nodes:write',     rollouts.createRollout),
  route('GET',    '/api/rollouts/{id}',           'nodes:read',      rollouts.getRollout),
  route('GET',    '/api/rollouts/{id}/nodes',     'nodes:read',      rollouts.listRolloutNodes),
  route('POST',   '/api/rollouts/{id}/pause',     'nodes:write',     rollouts.pauseRollout),
  route('POST',   '/api/rollouts/{id}/resume',    'nodes:write',     rollouts.resumeRollout),
  route('POST',   '/api/rollouts/{id}/abort',     'nodes:write',     rollouts.abortRollout),
  route('GET',    '/api/replication/standbys',    'settings:read',   replication.listStandbys),
  route('GET',    '/api/replication/snapshot',    'replication',     replication.getSnapshot),
  route('GET',    '/api/replication/changes',     'replication',     replication.listChanges),
  route('POST',   '/api/replication/promote',     '*',               replication.promoteStandby),
  route('GET',    '/api/export',                  '*',               transfer.exportAll),
  route('POST',   '/api/import',                  '*',               transfer.importDocument),
  route('GET',    '/api/backup',                  '*',               backup.getBackup),
  route('GET',    '/api/health',                  'public',          health.getHealth),
  route('GET',    '/api/metrics',                 'dashboard:read',  health.getMetrics),
  route('GET',    '/api/openapi.json',            'public',          openapi),
];

let document: unknown;
