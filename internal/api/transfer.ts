// Export and import of the whole forwarding setup (nodes without secrets, tunnels, rules)
// as one JSON document. Nodes and tunnels are referred to by name, which is unique, so a
// document can be imported into another master, or edited to move a dead node's rules.

import { DomainError, validationFailed } from '../errors/errors.ts';
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
  type FieldError,
  type Infer,
} from '../schema/schema.ts';
import { ruleFieldNames, ruleFieldsOf, type Rule, type RuleFields } from '../domain/rules.ts';
import { ROWS_PER_INSERT } from '../store/database.ts';
import type { Claim } from '../store/ports.ts';
import { EVERY_RULE } from '../store/rules.ts';
import type { Store } from '../store/store.ts';
import { insertNode, nodeInput } from './nodes.ts';
import { type Ctx, decodeBody, operation, operations, type Reply } from './route.ts';
import { insertRules, ruleInput } from './rules.ts';
import { insertTunnel, tunnelInput } from './tunnels.ts';
import {
  committedElsewhere,
  fieldErrorsUnder,
  writeInSteps,
  writeJobOf,
  type Effects,
  type InSteps,
  type JobDone,
  type Writer,
  type WriteJob,
} from './writes.ts';

const FORMAT = 'portplane-export';
const ALL = Number.MAX_SAFE_INTEGER;
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
const exportedTunnel = object(
  {
    name: tunnelName,
    entry_node: string({ min: 1, max: 64, description: 'Name of the entry node.' }),
    exit_node: string({ min: 1, max: 64, description: 'Name of the exit node.' }),
    listen_port: integer({ min: 1, max: 65535 }),
    transport: tunnelInput.properties.transport,
  },
  { ignore: ['id'] },
);
// A rule as it is written, but for its node and tunnel, which are named.
const { name: ruleName, node_id: _nodeId, tunnel_id: _tunnelId, ...ruleProperties } = ruleInput.properties;
const exportedRule = object(
  {
    name: ruleName,
    node: string({ min: 1, max: 64, description: 'Name of the node that listens.' }),
    tunnel: optional(nullable(string({ min: 1, max: 64, description: 'Name of the tunnel, or null.' })), null),
    ...ruleProperties,
  },
  { ignore: ['id'] },
);

export const exportDocument = object(
  {
    format: oneOf([FORMAT]),
    version: integer({ min: 1, max: 1, description: 'The document format version.' }),
    exported_at: optional(dateTime()),
    nodes: array(exportedNode, { max: 10_000 }),
    tunnels: array(exportedTunnel, { max: 10_000 }),
    rules: array(exportedRule, { max: 200_000 }),
  },
  {
    name: 'ExportDocument',
    description: 'Nodes (without SSH credentials or agent tokens), tunnels and rules; references are by name.',
  },
);
type ExportDocument = Infer<typeof exportDocument>;

/**
 * Everything as one export document in JSON, read in one snapshot of `store`. It grows with the data (200,000 rules
 * make tens of megabytes): cmd/master runs it in a worker thread on a connection of its own, so no request waits for
 * it.
 */
export function exportJson(store: Store, exportedAt: string): Buffer {
  return store.db.snapshot(() => Buffer.from(JSON.stringify(exportOf(store, exportedAt))));
}

function exportOf(store: Store, exportedAt: string): ExportDocument {
  const nodes = store.nodes.list({ afterId: 0, limit: ALL, status: null, tag: null, q: null });
  const tunnels = store.tunnels.list({ afterId: 0, limit: ALL, node_id: null, status: null, q: null });
  const rules = store.rules.list({ afterId: 0, limit: ALL, ...EVERY_RULE });
  const nodeNames = new Map(nodes.map((n) => [n.id, n.name]));
  const tunnelNames = new Map(tunnels.map((t) => [t.id, t.name]));
  return {
    format: FORMAT,
    version: 1,
    exported_at: exportedAt,
    nodes: nodes.map(({ name, host, ssh_port, ssh_user, tags }) => ({ name, host, ssh_port, ssh_user, tags })),
    tunnels: tunnels.map((t) => ({
      name: t.name,
      entry_node: nodeNames.get(t.entry_node_id)!,
      exit_node: nodeNames.get(t.exit_node_id)!,
      listen_port: t.listen_port,
      transport: t.transport,
    })),
    rules: rules.map((rule) => {
      const { name, node_id, tunnel_id, ...rest } = ruleFieldsOf(rule);
      return {
        name,
        node: nodeNames.get(node_id)!,
        tunnel: tunnel_id === null ? null : tunnelNames.get(tunnel_id)!,
        ...rest,
      };
    }),
  };
}

async function exportAll(ctx: Ctx<undefined, {}>): Promise<Reply> {
  const json = await ctx.app.exporter(ctx.app.timestamp());
  return {
    status: 200,
    json: Buffer.from(json.buffer, json.byteOffset, json.byteLength),
    headers: { 'Content-Disposition': 'attachment; filename="portplane-export.json"' },
  };
}

interface ImportResult {
  index: number;
  name: string;
  id: number | null;
  outcome: 'created' | 'exists' | 'invalid' | 'conflict';
  agent_token?: string;
}

/**
 * A name as SQLite's NOCASE compares it, which folds ASCII letters only: toLowerCase would
 * also make the Kelvin sign a k, and so a reference find a node the database would not.
 */
function nocase(name: string): string {
  return name.replace(/[A-Z]+/g, (letters) => letters.toLowerCase());
}

function sameRule(existing: Rule, fields: RuleFields): boolean {
  return ruleFieldNames.every((k) => JSON.stringify(existing[k]) === JSON.stringify(fields[k]));
}

async function importAll(app: Writer, effects: Effects, doc: ExportDocument, inSteps: InSteps) {
  const errors: FieldError[] = [];
  // The license limit is refused as it is everywhere (403 license_limit), not as one more invalid field.
  let overLicense = false;
  const nodeIds = new Map<string, number>();
  const tunnelIds = new Map<string, number>();
  // Names already on the master are looked up once: a document's rules mostly share a few nodes.
  const known = (ids: Map<string, number>, find: (name: string) => { id: number } | undefined) => (name: string) => {
    const key = nocase(name);
    let id = ids.get(key);
    if (id === undefined) {
      id = find(name)?.id;
      if (id !== undefined) ids.set(key, id);
    }
    return id;
  };
  const nodeId = known(nodeIds, (name) => app.store.nodes.findByName(name));
  const tunnelId = known(tunnelIds, (name) => app.store.tunnels.findByName(name));

  const attempt = <T>(pointer: string, fn: () => T, together = false): T | null => {
    try {
      return together ? effects.attemptTogether(fn) : effects.attempt(fn);
    } catch (error) {
      if (!(error instanceof DomainError) || !['validation_failed', 'conflict', 'license_limit'].includes(error.code))
        throw error;
      if (error.code === 'license_limit') overLicense = true;
      errors.push(...fieldErrorsUnder(pointer, error));
      return null;
    }
  };
  const missing = (pointer: string, kind: string, name: string) =>
    errors.push({ pointer, detail: `${kind} '${name}' is neither in this document nor on this master` });

  const importNode = (input: ExportDocument['nodes'][number], index: number): ImportResult => {
    const existing = app.store.nodes.findByName(input.name);
    if (existing) {
      nodeIds.set(nocase(input.name), existing.id);
      return { index, name: input.name, id: existing.id, outcome: 'exists' };
    }
    const made = attempt(`#/nodes/${index}`, () =>
      insertNode(app, effects, { ...input, ssh_private_key: undefined, ssh_password: undefined }),
    );
    if (!made) return { index, name: input.name, id: null, outcome: 'invalid' };
    nodeIds.set(nocase(input.name), made.node.id);
    return { index, name: input.name, id: made.node.id, outcome: 'created', agent_token: made.agent_token };
  };

  const importTunnel = (input: ExportDocument['tunnels'][number], index: number): ImportResult => {
    const existing = app.store.tunnels.findByName(input.name);
    if (existing) {
      tunnelIds.set(nocase(input.name), existing.id);
      return { index, name: input.name, id: existing.id, outcome: 'exists' };
    }
    const entry = nodeId(input.entry_node);
    const exit = nodeId(input.exit_node);
    if (entry === undefined) missing(`#/tunnels/${index}/entry_node`, 'node', input.entry_node);
    if (exit === undefined) missing(`#/tunnels/${index}/exit_node`, 'node', input.exit_node);
    if (entry === undefined || exit === undefined) return { index, name: input.name, id: null, outcome: 'invalid' };
    const made = attempt(`#/tunnels/${index}`, () =>
      insertTunnel(app, effects, {
        name: input.name,
        entry_node_id: entry,
        exit_node_id: exit,
        listen_port: input.listen_port,
        transport: input.transport,
      }),
    );
    if (!made) return { index, name: input.name, id: null, outcome: 'invalid' };
    tunnelIds.set(nocase(input.name), made.id);
    return { index, name: input.name, id: made.id, outcome: 'created' };
  };

  const importRule = (input: ExportDocument['rules'][number], index: number): ImportResult => {
    const node = nodeId(input.node);
    const tunnel = input.tunnel === null ? null : tunnelId(input.tunnel);
    if (node === undefined) missing(`#/rules/${index}/node`, 'node', input.node);
    if (tunnel === undefined) missing(`#/rules/${index}/tunnel`, 'tunnel', input.tunnel!);
    if (node === undefined || tunnel === undefined) return { index, name: input.name, id: null, outcome: 'invalid' };
    const fields = ruleFieldsOf({ ...input, node_id: node, tunnel_id: tunnel });
    const holder = app.store.rules.portHolder(fields);
    const existing = holder?.rule_id != null ? app.store.rules.find(holder.rule_id) : undefined;
    if (existing && sameRule(existing, fields)) return { index, name: input.name, id: existing.id, outcome: 'exists' };
    const result: ImportResult = { index, name: input.name, id: null, outcome: 'created' };
    toCreate.push({ fields, result, holder });
    if (toCreate.length >= createTogether) createPending();
    return result;
  };

  // While items run without savepoints, new rules go in many at a time (a failure means a redo item by item);
  // item by item, one at a time, so that each fails alone.
  const createTogether = effects.itemsTogether ? ROWS_PER_INSERT : 1;
  const toCreate: { fields: RuleFields; result: ImportResult; holder: Claim | undefined }[] = [];
  const createPending = () => {
    const batch = toCreate.splice(0);
    if (batch.length === 0) return;
    // Rules put off are judged after the items that followed them: any failure is redone item by item, where each
    // fails alone and the errors come in the document's order.
    const made = attempt(
      `#/rules/${batch[0]!.result.index}`,
      () =>
        insertRules(
          app,
          effects,
          batch.map((item) => item.fields),
          batch.map((item) => item.holder),
        ),
      true,
    );
    for (const [i, { result, holder }] of batch.entries()) {
      if (made) result.id = made[i]!.id;
      else result.outcome = holder ? 'conflict' : 'invalid';
    }
  };

  // Item by item, in steps, as every bulk write (see `writeInSteps`).
  const results = {
    nodes: await inSteps(doc.nodes, importNode),
    tunnels: await inSteps(doc.tunnels, importTunnel),
    rules: await inSteps(doc.rules, importRule),
  };
  createPending();
  if (errors.length > 0) {
    const failure = validationFailed(errors, `${errors.length} problem(s) in the document; nothing was imported`);
    const code = overLicense ? 'license_limit' : failure.code;
    throw new DomainError(code, failure.detail, { ...failure.facts, data: { results: stripTokens(results) } });
  }
  return results;
}

function stripTokens(results: Record<string, ImportResult[]>) {
  return Object.fromEntries(
    Object.entries(results).map(([key, items]) => [key, items.map(({ agent_token: _, ...item }) => item)]),
  );
}

const importQuery = { dry_run: boolParam('Check the document and report what would happen; change nothing.') };

/** An import to run where the app's `importer` runs it: the document as sent, and who sends it. */
export interface ImportJob extends WriteJob {
  document: Uint8Array;
}

/**
 * Decodes, checks and writes a document, all or nothing, on `app`'s own connection: the work
 * of the importer's worker thread. Throws a DomainError for what the caller got wrong.
 */
export async function runImport(app: Writer, job: ImportJob): Promise<JobDone> {
  const document = decodeBody(
    exportDocument,
    Buffer.from(job.document.buffer, job.document.byteOffset, job.document.length),
  );
  // The answer is rendered before the commit: what could fail for memory fails while it can still be undone. It is
  // encoded here too, rather than on the event loop (7 MiB for 10,000 nodes and 100,000 rules).
  const { result: json, nodes } = await writeInSteps(
    app,
    job.ctx,
    async (effects, inSteps) => {
      const results = await importAll(app, effects, document, inSteps);
      return Buffer.from(JSON.stringify({ dry_run: job.dryRun, ...(job.dryRun ? stripTokens(results) : results) }));
    },
    job.dryRun,
    true,
  );
  return { status: 200, json, nodes };
}

function importDocument(ctx: Ctx<unknown, QueryOf<typeof importQuery>>): Promise<Reply> {
  const job: ImportJob = { document: ctx.rawBody, ...writeJobOf(ctx, ctx.query.dry_run ?? false) };
  return committedElsewhere(ctx.app, () => ctx.app.importer(job));
}

const importResultItem = {
  type: 'object',
  required: ['index', 'name', 'id', 'outcome'],
  properties: {
    index: { type: 'integer' },
    name: { type: 'string' },
    id: { type: ['integer', 'null'] },
    outcome: { type: 'string', enum: ['created', 'exists', 'invalid', 'conflict'] },
    agent_token: secret({ type: 'string', description: 'For a created node: its agent token, shown only here.' }),
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
    handler: exportAll,
  }),
  importDocument: operation({
    action: 'config.import',
    summary: 'Recreate nodes, tunnels and rules from an export document',
    description:
      'All or nothing, into an empty or a populated master. Nodes and tunnels are matched by name: an existing ' +
      'one is kept as it is (exists), a missing one is created (new nodes get new agent tokens, shown once in ' +
      'the results; their SSH credentials must be set afterwards). A rule identical to one already on its node ' +
      'and port is exists; a different rule holding that port is a conflict. Any problem: 422 with its pointer ' +
      '(#/rules/12/node; up to 1,000 of them) and the per-item results, nothing changed; more nodes than the ' +
      'license allows: 403 license_limit, likewise. Bodies up to 64 MiB. ' +
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
          required: ['dry_run', 'nodes', 'tunnels', 'rules'],
          properties: {
            dry_run: { type: 'boolean' },
            nodes: { type: 'array', items: importResultItem },
            tunnels: { type: 'array', items: importResultItem },
            rules: { type: 'array', items: importResultItem },
          },
          additionalProperties: false,
        }),
      },
      403: { description: 'Lacking *, or the document holds more nodes than the license allows (license_limit)' },
    },
    handler: importDocument,
  }),
});
