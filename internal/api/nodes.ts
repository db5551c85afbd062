// Nodes on the wire: servers that run the agent, as written and read, and their handlers (the operations are in
// service/nodes.ts). SSH credentials are write-only; the agent token is shown once, at creation.

import { pageJson } from '../http/cursor.ts';
import { etagOf } from '../service/etag.ts';
import { notFound } from '../errors/errors.ts';
import { host } from '../schema/net.ts';
import { boolParam, listQuery, textParam, type QueryOf } from '../schema/query.ts';
import { formatTime, integer, nullable, object, optional, secret, string, type Infer } from '../schema/schema.ts';
import { insertNode, nodeView, removeNode, updateNode } from '../service/nodes.ts';
import { transact } from '../service/write.ts';
import { agentCommand } from '../install/agent-env.ts';
import { masterDial } from './dial.ts';
import { grantedPage, grantedTo, nodeAnswer, nodeFor } from './granted-nodes.ts';
import { seriesWindow, vitalsQuery, vitalsSeriesSchema } from './dashboard.ts';
import { nullableTimestamp, pageSchema, paging, record, sortParam, tagList, timestamp } from './common.ts';
import { vitalsSchema } from './node-vitals.ts';
import { created, type Ctx, idParam, noContent, ok, okJson, operation, operations } from './route.ts';
import { nodeStatuses } from '../domain/nodes.ts';
import { nodeSorts } from '../domain/sorts.ts';

const READ_ONLY = [
  'id',
  'status',
  'status_detail',
  'agent_version',
  'upgrade_available',
  'agent_release_keys',
  'kernel_path',
  'agent_fell_back',
  'last_seen_at',
  'traffic',
  'install',
  'vitals',
  'ssh_auth',
  'version',
  'created_at',
  'updated_at',
];

const PRIVATE_KEY = /^-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----\r?\n[\s\S]+\r?\n-----END [A-Z0-9 ]*PRIVATE KEY-----\s*$/;

export const nodeInput = object(
  {
    name: string({
      min: 1,
      max: 64,
      pattern: /^[A-Za-z0-9][A-Za-z0-9._-]*$/,
      patternHint: 'must start with a letter or digit and contain only letters, digits and . _ -',
      description: 'Unique, ignoring case.',
    }),
    host: host('Where the master reaches the node over SSH: hostname, IPv4 or IPv6.'),
    ssh_port: optional(integer({ min: 1, max: 65535 }), 22),
    ssh_user: optional(
      string({
        min: 1,
        max: 32,
        pattern: /^[a-z_][a-z0-9_-]*$/i,
        patternHint: 'must be a Unix user name (letters, digits, _ and -)',
      }),
      'root',
    ),
    ssh_private_key: optional(
      nullable(
        string({
          min: 1,
          max: 16384,
          secret: true,
          description: 'Write-only. A PEM or OpenSSH private key; absent keeps the stored credential, null removes it.',
          pattern: PRIVATE_KEY,
          patternHint: 'must be a PEM or OpenSSH private key',
        }),
      ),
    ),
    ssh_password: optional(
      nullable(
        string({
          min: 1,
          max: 1024,
          secret: true,
          description: 'Write-only; absent keeps the stored credential, null removes it.',
        }),
      ),
    ),
    tags: optional(tagList, []),
  },
  { name: 'NodeInput', ignore: READ_ONLY },
);
type NodeInput = Infer<typeof nodeInput>;

const nodeProperties = {
  id: { type: 'integer' },
  name: { type: 'string' },
  host: { type: 'string' },
  ssh_port: { type: 'integer' },
  ssh_user: { type: 'string' },
  ssh_auth: {
    type: 'string',
    enum: ['none', 'key', 'password'],
    description: 'Which SSH credential is stored (never the credential itself).',
  },
  tags: { type: 'array', items: { type: 'string' } },
  status: {
    type: 'string',
    enum: [...nodeStatuses],
    description:
      'From the live agent link, never from what was recorded before a restart or a restore: online while its ' +
      'agent is linked (a link silent for 45 s is closed within 5 s more), offline otherwise (every node at a ' +
      "master's start, until its agent links); installing while an install runs (at most 10 minutes, then " +
      'install_failed with timed_out; an install a stopped master left is install_failed, interrupted); new ' +
      'until it first had an agent. The node list, its status filter, the dashboard and the metrics all count ' +
      'from the same record.',
  },
  status_detail: {
    type: ['string', 'null'],
    description: 'Why the node is in its status, e.g. the reason its agent link or install failed.',
  },
  agent_version: { type: ['string', 'null'] },
  upgrade_available: {
    type: ['string', 'null'],
    description: "The newest agent bundle's version (GET /api/agent-bundles) when newer than this node's agent.",
  },
  agent_release_keys: { type: 'array', items: { type: 'string' }, description: 'The release keys its agent trusts.' },
  agent_fell_back: {
    ...record('FellBack', {
      from_version: { type: 'string', description: 'The bundle that crash-looped past its soak; null: none.' },
      to_version: { type: 'string', description: 'What its supervisor went back to: agent_crashloop holds while run.' },
      exits: { type: 'integer' },
      within_seconds: { type: 'integer' },
      at: { ...timestamp, description: 'When the master was told.' },
    }).json,
    type: ['object', 'null'],
  },
  kernel_path: {
    type: ['object', 'null'],
    description:
      "Whether the node's agent can forward rules in the kernel (nftables), and why not: as its agent last said " +
      '(null until an agent that knows of the kernel path linked). Rules it cannot carry there use the relay.',
    required: ['available', 'reason'],
    properties: {
      available: { type: 'boolean' },
      reason: { type: ['string', 'null'] },
      drifts: {
        type: 'integer',
        description:
          "Since the agent started: how often something else removed or changed the node's kernel table (a `flush " +
          'ruleset` in nftables.conf, a firewalld or Docker reload), each noticed within 2 s and written back (the ' +
          'bytes the kernel counted since its last report are lost with a removed table). Absent from older agents.',
      },
      last_drift_at: { ...nullableTimestamp, description: 'When the last drift was noticed, by the agent.' },
      flow_offload: {
        type: 'array',
        items: { type: 'string' },
        description:
          "Devices nftables flowtables offload connections on (flow offload): those connections bypass the node's " +
          'kernel table, whose counters then miss their bytes (traffic undercounts). Empty: none. Absent from older ' +
          'agents.',
      },
    },
    additionalProperties: false,
  },
  last_seen_at: {
    ...nullableTimestamp,
    description: 'When its agent last sent anything (it pings every 15 s); while linked, it moves with every message.',
  },
  traffic: {
    type: 'object',
    required: ['bytes_in', 'bytes_out'],
    properties: { bytes_in: { type: 'integer' }, bytes_out: { type: 'integer' } },
    additionalProperties: false,
  },
  install: {
    type: 'object',
    description: 'The last install-ssh or reinstall: when it ran and the end of its log.',
    required: ['started_at', 'finished_at', 'log_tail'],
    properties: {
      started_at: nullableTimestamp,
      finished_at: nullableTimestamp,
      log_tail: { type: ['string', 'null'], description: 'The last 8 KiB of the install log.' },
    },
    additionalProperties: false,
  },
  vitals: vitalsSchema,
  version: { type: 'integer' },
  created_at: timestamp,
  updated_at: timestamp,
};
export const nodeSchema = record('Node', nodeProperties);
const nodeCreatedSchema = record('NodeCreated', {
  ...nodeProperties,
  agent_token: secret({
    type: 'string',
    description: "The agent's credential (prefix mat_). Shown only in this response.",
  }),
  master_pin: {
    type: ['string', 'null'],
    description:
      'The pin of the key this master serves HTTPS with (sha256/<base64>, RFC 7469), which agents check it by; ' +
      'null over plain HTTP.',
  },
  agent_command: secret({
    type: ['string', 'null'],
    description:
      "The command that starts this node's agent by hand: master URL (install_master_url, else the address this " +
      'request reached), pin and token. Null when the request does not say where the master is. Shown only here.',
  }),
});

const listNodesQuery = {
  ...listQuery,
  status: textParam({ max: 16, values: nodeStatuses }),
  tag: textParam({ max: 32, description: 'Only nodes carrying this tag.' }),
  q: textParam({ max: 64, description: 'Substring of the name or host.' }),
  sort: sortParam(nodeSorts),
};

export const cascadeQuery = { cascade: boolParam('Also delete what still refers to it.') };

/** What ?cascade=true on a node deletes, and the scope each needs besides nodes:write. */
export const CASCADE_FROM_NODE = [
  { scope: 'rules:write', when: "?cascade=true deletes the node's rules (and those of tunnels through it)" },
  { scope: 'tunnels:write', when: '?cascade=true deletes the tunnels that enter or leave at the node' },
] as const;

export const nodeOperations = operations({
  listNodes: operation({
    summary: 'List nodes',
    description: 'A tenant sees the nodes their plan grants (by id or tag), each as a GrantedNode.',
    tenants: true,
    query: listNodesQuery,
    responses: { 200: { description: 'A page of nodes', schema: pageSchema(nodeAnswer(nodeSchema.json)) } },
    handler: (ctx: Ctx<undefined, QueryOf<typeof listNodesQuery>>) => {
      const { limit, after, count, sorted } = paging(ctx.query);
      const granted = grantedTo(ctx);
      const page = ctx.app.store.nodes.page({
        afterId: after,
        limit,
        count,
        sorted,
        granted,
        status: ctx.query.status ?? null,
        tag: ctx.query.tag ?? null,
        q: ctx.query.q ?? null,
      });
      return okJson(pageJson(granted ? grantedPage(page) : page, sorted && ctx.query.sort));
    },
  }),
  createNode: operation({
    action: 'node.create',
    summary: 'Add a node; its agent token is in this response only',
    description:
      'Give at most one SSH credential (ssh_private_key or ssh_password); it is encrypted at rest and never ' +
      'returned. The license limits how many nodes may exist (403 license_limit).',
    body: nodeInput,
    responses: {
      201: { description: 'Created', schema: nodeCreatedSchema },
      403: { description: 'Lacking nodes:write, or the license allows no more nodes (license_limit)' },
      409: { description: 'The name is taken' },
    },
    handler: async (ctx: Ctx<NodeInput, {}>) => {
      const { node, agent_token } = await transact(ctx.app, ctx, (change) => insertNode(ctx.app, change, ctx.body));
      const dial = masterDial(ctx);
      return created(
        {
          ...nodeView(node),
          agent_token,
          master_pin: ctx.app.tls?.pin ?? null,
          agent_command: dial && agentCommand(dial, agent_token),
        },
        { Location: `/api/nodes/${node.id}`, ETag: etagOf(node.version) },
      );
    },
  }),
  getNodeVitals: operation({
    summary: "A node's vitals over time",
    description:
      'CPU, load, memory in use and network bytes a second, from the reports of its agent (a point a minute, then ' +
      'an hour, then a day, kept as traffic is: see "Traffic and vitals history"), averaged per step.',
    query: vitalsQuery,
    responses: { 200: { description: 'The series', schema: vitalsSeriesSchema } },
    // A node's vitals over time, a point per step that had reports (averaged), oldest first.
    handler: (ctx: Ctx<undefined, QueryOf<typeof vitalsQuery>>) => {
      const { app } = ctx;
      const id = idParam(ctx);
      if (!app.store.nodes.exists(id)) throw notFound('node', id);
      const { from, to, step } = seriesWindow(ctx.query, app.timestamp(), { step: 60, spanSeconds: 3600 });
      const points = app.store.vitals.series(id, from, to, step);
      return ok({
        node_id: id,
        from: formatTime(from * 1000),
        to: formatTime(to * 1000),
        step,
        points: points.map(({ at, ...point }) => ({ at: formatTime(at * 1000), ...point })),
      });
    },
  }),
  getNode: operation({
    summary: 'Show a node',
    description: 'A tenant sees a node their plan grants, as a GrantedNode; any other is 404 to them.',
    tenants: true,
    responses: { 200: { description: 'The node', schema: nodeAnswer(nodeSchema.json) } },
    handler: (ctx: Ctx<undefined, {}>) => {
      const node = ctx.app.store.nodes.json(idParam(ctx));
      const shown = node && nodeFor(ctx, node.json);
      if (!shown) throw notFound('node', ctx.params.id!);
      return okJson(shown, { ETag: etagOf(node.version) });
    },
  }),
  replaceNode: operation({
    action: 'node.update',
    summary: "Replace a node's settings",
    description:
      'Absent SSH credentials keep the stored one; null removes it. Changing host, ssh_port or ssh_user of a ' +
      'node with a stored credential needs the credential (or null) in the same request (422 otherwise): a ' +
      'credential never follows a node to another address. Status, agent and traffic fields are read-only and ' +
      'ignored.',
    body: nodeInput,
    responses: { 200: { description: 'Updated', schema: nodeSchema }, 409: { description: 'The name is taken' } },
    handler: async (ctx: Ctx<NodeInput, {}>) => {
      const node = await transact(ctx.app, ctx, (change) =>
        updateNode(ctx.app, change, idParam(ctx), ctx.body, ctx.headers['if-match']),
      );
      return ok(nodeView(node), { ETag: etagOf(node.version) });
    },
  }),
  deleteNode: operation({
    action: 'node.delete',
    summary: 'Delete a node',
    description:
      'A node that still has rules or tunnels is 409 (listing them) unless ?cascade=true, which deletes them ' +
      "too, each with its own audit entry. The node's agent link ends, and its token no longer links.",
    query: cascadeQuery,
    responses: {
      204: { description: 'Deleted' },
      403: { description: 'Lacking nodes:write, or a scope the cascade needs' },
      409: { description: 'Still has rules or tunnels' },
    },
    handler: async (ctx: Ctx<undefined, QueryOf<typeof cascadeQuery>>) => {
      await transact(ctx.app, ctx, (change) =>
        removeNode(ctx.app, change, idParam(ctx), ctx.query.cascade ?? false, ctx.headers['if-match']),
      );
      return noContent();
    },
  }),
});
