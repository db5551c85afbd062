// Agent bundles on the wire (operations in service/bundles.ts): the versions of the agent the master carries, each
// signed by a release key.

import { etagOf } from '../service/etag.ts';
import { BUNDLE_VERSION, SIGNATURE_FORMAT, type BundleSignature } from '../release/signature.ts';
import { integer, object, oneOf, string, type Infer } from '../schema/schema.ts';
import { addBundle, MAX_BUNDLES, removeBundle } from '../service/bundles.ts';
import { MAX_BUNDLE_BYTES } from '../domain/link.ts';
import { transact } from '../service/write.ts';
import { pageSchema, record, timestamp } from './common.ts';
import { created, type Ctx, idParam, noContent, ok, operation, operations } from './route.ts';

const signatureInput = object(
  {
    format: oneOf([SIGNATURE_FORMAT]),
    version: string({ min: 5, max: 48, pattern: BUNDLE_VERSION, patternHint: 'must be major.minor.patch' }),
    sha256: string({ min: 64, max: 64, pattern: /^[0-9a-f]{64}$/, patternHint: 'must be 64 hex digits' }),
    size: integer({ min: 1, max: MAX_BUNDLE_BYTES }),
    key: string({ min: 8, max: 64, description: "The release key's id (sha256/...)." }),
    signature: string({ min: 1, max: 200 }),
  },
  { name: 'BundleSignature', description: 'The .sig file `npm run release -- sign` writes.' },
);

export const bundleInput = object(
  {
    bundle: string({
      min: 4,
      max: Math.ceil(MAX_BUNDLE_BYTES / 3) * 4,
      pattern: /^[A-Za-z0-9+/]+={0,2}$/,
      patternHint: 'must be base64',
      description: 'The agent bundle (agent.mjs), base64.',
    }),
    signature: signatureInput,
  },
  { name: 'BundleInput' },
);

const bundleSchema = record('AgentBundle', {
  id: { type: 'integer' },
  version: { type: 'string' },
  sha256: { type: 'string' },
  size: { type: 'integer' },
  key_id: { type: 'string', description: 'The release key that signed it.' },
  created_at: timestamp,
});

export const bundleOperations = operations({
  listBundles: operation({
    summary: 'List the agent bundles the master carries',
    responses: { 200: { description: 'Every bundle, oldest first', schema: pageSchema(bundleSchema) } },
    handler: (ctx: Ctx<undefined, {}>) => ok({ items: ctx.app.store.bundles.list(), next_cursor: null }),
  }),
  createBundle: operation({
    action: 'bundle.create',
    summary: 'Give the master an agent bundle, signed by a release key',
    description:
      'Kept only if its signature (the .sig of `npm run release -- sign`) verifies against a release key the ' +
      `master was started with (--release-key; 409 without one) and is of exactly these bytes (422 naming what ` +
      `does not hold). At most ${MAX_BUNDLES} bundles of ${MAX_BUNDLE_BYTES / 1024 / 1024} MiB; a version once.`,
    body: bundleInput,
    maxBodyBytes: 24 * 1024 * 1024,
    responses: {
      201: { description: 'Kept', schema: bundleSchema },
      409: { description: 'No release key, the version is there, or the master carries as many as it keeps' },
    },
    handler: async (ctx: Ctx<Infer<typeof bundleInput>, {}>) => {
      const body = Buffer.from(ctx.body.bundle, 'base64');
      const signature = ctx.body.signature as BundleSignature;
      const bundle = await transact(ctx.app, ctx, (change) =>
        addBundle(ctx.app, change, body, signature, ctx.app.releaseKeys),
      );
      // A bundle never changes: its one version.
      return created(bundle, { Location: `/api/agent-bundles/${bundle.id}`, ETag: etagOf(1) });
    },
  }),
  deleteBundle: operation({
    action: 'bundle.delete',
    summary: 'Delete an agent bundle',
    responses: { 204: { description: 'Deleted' }, 409: { description: 'A rollout under way is taking it to nodes' } },
    handler: async (ctx: Ctx<undefined, {}>) => {
      await transact(ctx.app, ctx, (change) => removeBundle(ctx.app, change, idParam(ctx), ctx.headers['if-match']));
      return noContent();
    },
  }),
});
