// Export and import on the wire: the document's schema (nodes without secrets, tunnels and rules, referred to by
// name) and the handlers that hand the work to a worker thread (service/transfer.ts runs it there).

import { MAX_TUNNEL_EXITS } from '../domain/tunnels.ts';
import { boolParam, type QueryOf } from '../schema/query.ts';
import {
  array,
  dateTime,
  describe,
  integer,
  nullable,
  object,
  oneOf,
  optional,
  secret,
  string,
} from '../schema/schema.ts';
import { validationFailed } from '../errors/errors.ts';
import { portBudgetProblem } from '../domain/ranges.ts';
import { EXPORT_FORMAT, type ExportDocument, type ImportJob } from '../service/transfer.ts';
import { committedElsewhere } from '../service/write.ts';
import { writeJobOf } from './common.ts';
import { nodeInput } from './nodes.ts';
import { type Ctx, decodeBody, operation, operations, type Reply } from './route.ts';
import { ruleInput } from './rule-schema.ts';
import { tunnelInput } from './tunnel-input.ts';
import { channelInput } from './channels.ts';
import { alertRuleInput } from './alert-rules.ts';
import { MAX_ALERT_RULES } from '../service/alert-rules.ts';
import { MAX_CHANNELS } from '../service/channels.ts';

const nodeName = nodeInput.properties.name;
const tunnelName = tunnelInput.properties.name;

const exportedNode = object(
  {
    name: nodeName,
    host: nodeInput.properties.host,
    ssh_port: nodeInput.properties.ssh_port,
    ssh_user: nodeInput.properties.ssh_user,
    tags: nodeInput.properties.tags,
  },
  { ignore: ['id'] },
);
const owner = optional(
  nullable(
    string({
      min: 1,
      max: 64,
      description: "The owner's username. Left out or null: the importer; another user needs users:write.",
    }),
  ),
  null,
);
const exportedTunnel = object(
  {
    name: tunnelName,
    owner,
    entry_node: string({ min: 1, max: 64, description: 'Name of the entry node.' }),
    exit_node: string({ min: 1, max: 64, description: 'Name of the (first) exit node.' }),
    exit_nodes: optional(
      nullable(
        array(string({ min: 1, max: 64 }), {
          min: 1,
          max: MAX_TUNNEL_EXITS,
          description: 'Version 2: every exit node by name, in order, exit_node first. Absent: exit_node alone.',
        }),
      ),
      null,
    ),
    listen_port: integer({ min: 1, max: 65535 }),
    exit_ports: tunnelInput.properties.exit_ports,
    transport: tunnelInput.properties.transport,
    via: tunnelInput.properties.via,
    exit_vias: tunnelInput.properties.exit_vias,
    exit_strategy: tunnelInput.properties.exit_strategy,
    probe_target: tunnelInput.properties.probe_target,
  },
  { ignore: ['id'] },
);
// A rule as it is written, but for its owner, node and tunnel, which are named.
const {
  name: ruleName,
  owner_id: _ownerId,
  node_id: _nodeId,
  tunnel_id: _tunnelId,
  ...ruleProperties
} = ruleInput.properties;
const exportedRule = object(
  {
    name: ruleName,
    owner,
    node: string({ min: 1, max: 64, description: 'Name of the node that listens.' }),
    tunnel: optional(nullable(string({ min: 1, max: 64, description: 'Name of the tunnel, or null.' })), null),
    ...ruleProperties,
  },
  { ignore: ['id'] },
);

// A channel as written, but for its secret (never exported).
const {
  secret: _secret,
  bot_token: _botToken,
  smtp_password: _smtpPassword,
  ...channelProperties
} = channelInput.properties;
const exportedChannel = object(channelProperties, { ignore: ['id'] });
const names = (description: string) =>
  optional(array(string({ min: 1, max: 200 }), { max: 100, description }), [] as string[]);
const {
  node_ids: _nodeIds,
  resource_ids: _resourceIds,
  channel_ids: _channelIds,
  ...alertRuleProperties
} = alertRuleInput.properties;
const exportedAlertRule = object(
  {
    ...alertRuleProperties,
    nodes: names('Nodes by name.'),
    resources: names('What it watches: nodes and tunnels by name, rules as node/protocol/port (edge-1/tcp/8080).'),
    channels: array(string({ min: 1, max: 64 }), { min: 1, max: 20, description: 'Channels by name.' }),
  },
  { ignore: ['id'] },
);

export const exportDocument = object(
  {
    format: oneOf([EXPORT_FORMAT]),
    version: integer({
      min: 1,
      max: 2,
      description: 'The document format version: 2 since tunnels have several exits; 1 is read as before.',
    }),
    exported_at: optional(dateTime()),
    nodes: array(exportedNode, { max: 10_000 }),
    tunnels: array(exportedTunnel, { max: 10_000 }),
    rules: array(exportedRule, { max: 200_000 }),
    channels: optional(array(exportedChannel, { max: MAX_CHANNELS, description: 'Alert channels, without secrets.' })),
    alert_rules: optional(array(exportedAlertRule, { max: MAX_ALERT_RULES, description: 'Alert rules.' })),
  },
  {
    name: 'ExportDocument',
    description:
      'Nodes (without SSH credentials or agent tokens), tunnels, rules, alert channels (without secrets) and ' +
      'alert rules; references are by name.',
  },
);

/** A document decoded and checked against `exportDocument`. Throws `invalid_json`, `validation_failed`. */
/**
 * The arrays and objects an import's document may open. Its worker's heap is 1 GiB, and a heap that fills while
 * JSON.parse builds one large array ends the whole process, not the thread (nodejs/node#47224): a 60 MiB body of
 * nothing but `{},` did. Two million take at most 150 MiB; a document of 64 MiB, the most a body may be, holds about
 * 450,000 rules at two each (the rule and its targets), fewer with more.
 */
export const MAX_IMPORT_OPENED = 2_000_000;

export function decodeExportDocument(raw: Buffer): ExportDocument {
  const document = decodeBody(exportDocument, raw, MAX_IMPORT_OPENED);
  const tooMany = portBudgetProblem(document.rules);
  if (tooMany) throw validationFailed([{ pointer: '#/rules', detail: `the rules ${tooMany}` }]);
  return document;
}

const importQuery = { dry_run: boolParam('Check the document and report what would happen; change nothing.') };

const importResultItem = {
  type: 'object',
  required: ['index', 'name', 'id', 'outcome'],
  properties: {
    index: { type: 'integer' },
    name: { type: 'string' },
    id: { type: ['integer', 'null'] },
    outcome: { type: 'string', enum: ['created', 'exists', 'invalid', 'conflict'] },
    agent_token: secret({ type: 'string', description: 'For a created node: its agent token, shown only here.' }),
    secret: secret({
      type: 'string',
      description: 'For a created webhook channel: the signing secret the master made, shown only here.',
    }),
  },
  additionalProperties: false,
};

export const transferOperations = operations({
  exportAll: operation({
    summary: 'Export nodes (without secrets), tunnels and rules as one document',
    description:
      'It spans every resource, so it needs *. SSH credentials and agent tokens are never exported. It is read in ' +
      'one snapshot (what is written meanwhile is in the next one) and made in a worker thread, so other requests ' +
      'are answered while it is.',
    responses: {
      200: {
        description: 'The document',
        schema: exportDocument,
        headers: {
          'Content-Disposition': {
            description: 'attachment; filename="portplane-export.json"',
            schema: { type: 'string' },
          },
        },
      },
    },
    handler: async (ctx: Ctx<undefined, {}>): Promise<Reply> => {
      const json = await ctx.app.exporter(ctx.app.timestamp());
      return {
        status: 200,
        json: Buffer.from(json.buffer, json.byteOffset, json.byteLength),
        headers: { 'Content-Disposition': 'attachment; filename="portplane-export.json"' },
      };
    },
  }),
  importDocument: operation({
    action: 'config.import',
    summary: 'Recreate nodes, tunnels and rules from an export document',
    description:
      'All or nothing, into an empty or a populated master. Nodes and tunnels are matched by name: an existing ' +
      'one is kept as it is (exists), a missing one is created (new nodes get new agent tokens, shown once in ' +
      'the results; their SSH credentials must be set afterwards). Alert channels and rules likewise by name; a ' +
      'new webhook channel gets a new signing secret (in the results, once), a new bot or mail login none until ' +
      'one is set (has_secret). A rule identical to one already on its node ' +
      'and port is exists; a different rule holding that port is a conflict. Any problem: 422 with its pointer ' +
      '(#/rules/12/node; up to 1,000 of them) and the per-item results, nothing changed; more nodes than the ' +
      'license allows: 403 license_limit, likewise. Bodies up to 64 MiB, opening at most ' +
      `${MAX_IMPORT_OPENED.toLocaleString('en')} arrays and objects in all (413 past either). ` +
      'The document is read, checked and written beside the API (in a worker thread, on a database connection ' +
      'of its own), so the API goes on answering meanwhile: reads see the master as it was until the whole ' +
      "import is committed, and other writes (API calls, agents' reports) wait for it and then proceed. It answers " +
      'once committed; other writes wait a moment longer, while its pages are copied into the database file.',
    query: importQuery,
    body: exportDocument,
    decodesBody: true,
    maxBodyBytes: 64 * 1024 * 1024,
    responses: {
      200: {
        description: 'Per item, in document order',
        schema: describe({
          type: 'object',
          required: ['dry_run', 'nodes', 'tunnels', 'rules', 'channels', 'alert_rules'],
          properties: {
            dry_run: { type: 'boolean' },
            nodes: { type: 'array', items: importResultItem },
            tunnels: { type: 'array', items: importResultItem },
            rules: { type: 'array', items: importResultItem },
            channels: { type: 'array', items: importResultItem },
            alert_rules: { type: 'array', items: importResultItem },
          },
          additionalProperties: false,
        }),
      },
      403: { description: 'Lacking *, or the document holds more nodes than the license allows (license_limit)' },
    },
    handler: (ctx: Ctx<unknown, QueryOf<typeof importQuery>>): Promise<Reply> => {
      const job: ImportJob = { document: ctx.rawBody, ...writeJobOf(ctx, ctx.query.dry_run ?? false) };
      return committedElsewhere(ctx.app, job, ctx.app.importer);
    },
  }),
});
