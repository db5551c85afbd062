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
  validate,
  type Schema,
} from '../schema/schema.ts';
import { validationFailed } from '../errors/errors.ts';
import { portBudgetProblem } from '../domain/ranges.ts';
import { EXPORT_FORMAT, type Decoded, type ExportDocument, type ImportJob } from '../service/transfer.ts';
import { importFormats, translate, type ForeignImport, type Translated } from '../formats/formats.ts';
import { SourceError } from '../formats/foreign.ts';
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
  webhook_url: _webhookUrl,
  topic_url: _topicUrl,
  access_token: _accessToken,
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

/**
 * The arrays and objects an import's document may open. Its worker's heap is 1 GiB, and a heap that fills while
 * JSON.parse builds one large array ends the whole process, not the thread (nodejs/node#47224): a 60 MiB body of
 * nothing but `{},` did. Two million take at most 150 MiB; a document of 64 MiB, the most a body may be, holds about
 * 450,000 rules at two each (the rule and its targets), fewer with more.
 */
export const MAX_IMPORT_OPENED = 2_000_000;

const foreignImport = object(
  {
    format: oneOf(importFormats, {
      description:
        'The tool whose config source is, read for one node into rules: realm (its TOML), iptables ' +
        '(iptables-save), nftables (nft -j list ruleset), haproxy (its config), gost (v3, JSON), nodepass (URLs, ' +
        'one a line).',
    }),
    node: string({ min: 1, max: 64, description: 'The node the source is read for, by name: its rules listen there.' }),
    peer_node: optional(
      nullable(
        string({
          min: 1,
          max: 64,
          description:
            'Where a pair of ends in the source makes a tunnel: the node at its other end, by name (NodePass: the ' +
            "client's, the tunnel's exit; gost rtcp: the relay's, the tunnel's entry).",
        }),
      ),
      null,
    ),
    source: string({ min: 1, max: 16 * 1024 * 1024, description: 'The config, as the tool reads it.' }),
  },
  { name: 'ForeignImport' },
);

/** An import's body: an export document, or another tool's config, told apart by `format`. */
const importBody: Schema<ExportDocument | ForeignImport> = {
  json: {
    oneOf: [exportDocument.json, foreignImport.json],
    description:
      `By format: ${EXPORT_FORMAT} (an export document) or another tool's config ` + `(${importFormats.join(', ')}).`,
  },
  check(value, pointer, errors) {
    const format = (value as { format?: unknown } | null)?.format;
    if (typeof format === 'string' && (importFormats as string[]).includes(format))
      return foreignImport.check(value, pointer, errors);
    if (typeof format === 'string' && format !== EXPORT_FORMAT) {
      errors.push({
        pointer: `${pointer}/format`,
        detail: `must be one of ${[EXPORT_FORMAT, ...importFormats].join(', ')}`,
      });
      return value as ExportDocument;
    }
    return exportDocument.check(value, pointer, errors);
  },
};

function checkedDocument(document: ExportDocument): ExportDocument {
  const tooMany = portBudgetProblem(document.rules);
  if (tooMany) throw validationFailed([{ pointer: '#/rules', detail: `the rules ${tooMany}` }]);
  return document;
}

/**
 * An import's body decoded: an export document as it is, another tool's config read into one (and checked as one,
 * each problem naming the source line of its rule). Throws `invalid_json`, `validation_failed`.
 */
export function decodeImport(raw: Buffer): Decoded {
  const body = decodeBody(importBody, raw, MAX_IMPORT_OPENED);
  if (body.format === EXPORT_FORMAT) return { document: checkedDocument(body as ExportDocument) };
  let translated: Translated;
  try {
    translated = translate(body as ForeignImport);
  } catch (error) {
    if (!(error instanceof SourceError)) throw error;
    throw validationFailed([{ pointer: '#/source', detail: `line ${error.line}: ${error.message}` }]);
  }
  const generated = { format: EXPORT_FORMAT, version: 2, nodes: [], ...pick(translated, ['tunnels', 'rules']) };
  const { value, errors } = validate(exportDocument, generated);
  const lineOf = (pointer: string) => {
    const [, kind, index] = /^#\/(rules|tunnels)\/(\d+)/.exec(pointer) ?? [];
    const line = kind ? translated.lines[kind as 'rules' | 'tunnels'][Number(index)] : undefined;
    return line === undefined ? '' : `line ${line}: `;
  };
  if (errors.length > 0)
    throw validationFailed(errors.map((error) => ({ ...error, detail: `${lineOf(error.pointer)}${error.detail}` })));
  return { document: checkedDocument(value), foreign: { unmapped: translated.unmapped, lines: translated.lines } };
}

const pick = <T extends object, K extends keyof T>(from: T, keys: K[]) =>
  Object.fromEntries(keys.map((key) => [key, from[key]])) as Pick<T, K>;

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
    line: { type: 'integer', description: "Another tool's config: the line of the source the item was read from." },
  },
  additionalProperties: false,
};

const unmappedSchema = {
  type: 'array',
  description: "Another tool's config: each construct of the source that is not carried over, with its line and why.",
  items: {
    type: 'object',
    required: ['line', 'construct', 'why'],
    properties: { line: { type: 'integer' }, construct: { type: 'string' }, why: { type: 'string' } },
    additionalProperties: false,
  },
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
    body: importBody,
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
            unmapped: unmappedSchema,
            document: exportDocument.json,
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
