// Passkeys on the wire (operations in service/passkeys.ts): one's own registered, listed, renamed and removed from
// one's own session; anyone signs in with one. Binary parts travel as base64url, as PublicKeyCredential.toJSON()
// gives them.

import { describe, object, optional, string, type Infer } from '../schema/schema.ts';
import {
  MAX_PASSKEYS,
  ownPasskeys,
  registerPasskey,
  registrationOptions,
  removePasskey,
  removeUserPasskeys,
  renamePasskey,
  userPasskeys,
  signInOptions,
  signInWithPasskey,
} from '../service/passkeys.ts';
import { etagOf } from '../service/etag.ts';
import { loginResult, summaryOf } from './auth.ts';
import { record, timestamp, nullableTimestamp } from './common.ts';
import { created, type Ctx, idParam, noContent, ok, operation, operations } from './route.ts';

const base64url = (max: number, description: string) =>
  string({ min: 1, max, pattern: /^[A-Za-z0-9_-]+$/, patternHint: 'must be base64url', description });

const name = string({
  min: 1,
  max: 64,
  pattern: /^[^\x00-\x1f\x7f]+$/,
  patternHint: 'must be printable',
  description: 'What its user calls it ("laptop", "phone").',
});

const passkeySchema = record('Passkey', {
  id: { type: 'integer' },
  name: { type: 'string' },
  algorithm: { type: 'integer', description: 'Its COSE algorithm: -7 ES256, -8 EdDSA, -257 RS256.' },
  created_at: timestamp,
  last_used_at: nullableTimestamp,
  version: { type: 'integer' },
});

const passkeyList = record('Passkeys', { items: { type: 'array', items: passkeySchema.json } });

const options = describe({
  title: 'PasskeyOptions',
  type: 'object',
  required: ['challenge', 'timeout'],
  properties: {
    challenge: { type: 'string', description: 'base64url; answered once, within 5 minutes.' },
    timeout: { type: 'integer', description: 'How long the browser may take, in ms.' },
  },
  description: "WebAuthn's options for the browser as they are (rp, user, pubKeyCredParams ... or rpId).",
});

const registration = object(
  {
    name,
    credential: object({
      id: base64url(1400, 'The credential id.'),
      response: object({
        clientDataJSON: base64url(4096, 'As the browser gave it.'),
        attestationObject: base64url(16_384, 'As the browser gave it.'),
      }),
    }),
  },
  { name: 'PasskeyRegistration' },
);

const rename = object({ name }, { name: 'PasskeyRename' });

const assertion = object(
  {
    credential: object({
      id: base64url(1400, 'The credential id.'),
      response: object({
        clientDataJSON: base64url(4096, 'As the browser gave it.'),
        authenticatorData: base64url(4096, 'As the browser gave it.'),
        signature: base64url(1024, 'As the browser gave it.'),
        userHandle: optional(base64url(128, 'As the browser gave it.')),
      }),
    }),
  },
  { name: 'PasskeySignIn' },
);

const passkeysRemoved = record('PasskeysRemoved', {
  passkeys_removed: { type: 'integer', description: 'How many of their passkeys were removed.' },
});

const OFF = 'Passkeys are off: public_url is unset or an IP address (conflict)';

export const passkeyOperations = operations({
  beginPasskeyRegistration: operation({
    tenants: true,
    action: 'auth.passkey_options',
    summary: 'Start registering a passkey',
    description:
      'What navigator.credentials.create needs (PublicKeyCredentialCreationOptions, binary parts base64url): a ' +
      'challenge, the relying party (public_url: its host is the RP id), ES256, EdDSA and RS256, attestation none, ' +
      'a discoverable credential with user verification. A login session only.',
    responses: { 200: { description: 'The options', schema: options }, 409: { description: OFF } },
    handler: (ctx: Ctx<undefined, {}>) => ok(registrationOptions(ctx.app, ctx.caller)),
  }),
  createPasskey: operation({
    tenants: true,
    action: 'passkey.create',
    summary: 'Register a passkey',
    description:
      "The browser's answer to a challenge of the caller's: its client data (type, challenge, origin) and " +
      'authenticator data (RP id, user present and verified) checked, its public key kept (attestation not ' +
      `trusted for anything). 422 saying why one is refused; 409 past ${MAX_PASSKEYS}, or for one kept already.`,
    body: registration,
    responses: {
      201: { description: 'Registered', schema: passkeySchema },
      409: { description: `${OFF}; or ${MAX_PASSKEYS} kept already, or this one` },
      422: { description: 'Refused' },
    },
    handler: async (ctx: Ctx<Infer<typeof registration>, {}>) => {
      const { response } = ctx.body.credential;
      const passkey = await registerPasskey(ctx.app, ctx, ctx.caller, { name: ctx.body.name, ...response });
      return created(passkey, { Location: `/api/auth/passkeys/${passkey.id}`, ETag: etagOf(passkey.version) });
    },
  }),
  listPasskeys: operation({
    tenants: true,
    summary: "The caller's passkeys",
    responses: { 200: { description: 'Their passkeys', schema: passkeyList } },
    handler: (ctx: Ctx<undefined, {}>) => ok({ items: ownPasskeys(ctx.app, ctx.caller) }),
  }),
  renamePasskey: operation({
    tenants: true,
    action: 'passkey.update',
    summary: "Rename one of the caller's passkeys",
    body: rename,
    responses: { 200: { description: 'Renamed', schema: passkeySchema } },
    handler: async (ctx: Ctx<Infer<typeof rename>, {}>) => {
      const id = idParam(ctx);
      const passkey = await renamePasskey(ctx.app, ctx, ctx.caller, id, ctx.body.name, ctx.headers['if-match']);
      return ok(passkey, { ETag: etagOf(passkey.version) });
    },
  }),
  deletePasskey: operation({
    tenants: true,
    action: 'passkey.delete',
    summary: "Remove one of the caller's passkeys",
    responses: { 204: { description: 'Removed' } },
    handler: async (ctx: Ctx<undefined, {}>) => {
      await removePasskey(ctx.app, ctx, ctx.caller, idParam(ctx), ctx.headers['if-match']);
      return noContent();
    },
  }),
  listUserPasskeys: operation({
    summary: "A user's passkeys",
    description: 'For an operator who looks into an account (a device lost or stolen).',
    responses: { 200: { description: 'Their passkeys', schema: passkeyList } },
    handler: (ctx: Ctx<undefined, {}>) => ok({ items: userPasskeys(ctx.app, idParam(ctx)) }),
  }),
  removeUserPasskeys: operation({
    action: 'user.passkeys_remove',
    summary: 'Remove every passkey of a user',
    description:
      'A device lost or stolen: none of their passkeys signs in from now (end their sessions too, DELETE ' +
      '/api/users/{id}/sessions); they register again from a session. 412 for an If-Match that is not the ' +
      "user's ETag.",
    responses: { 200: { description: 'Removed', schema: passkeysRemoved } },
    handler: async (ctx: Ctx<undefined, {}>) =>
      ok({ passkeys_removed: await removeUserPasskeys(ctx.app, ctx, idParam(ctx), ctx.headers['if-match']) }),
  }),
  beginPasskeySignIn: operation({
    action: 'auth.passkey_options',
    standby: 'serves',
    summary: 'Start signing in with a passkey',
    description:
      'What navigator.credentials.get needs: a challenge and the RP id; any passkey of this site is offered ' +
      'by the authenticator (no username asked).',
    responses: {
      200: { description: 'The options', schema: options },
      409: { description: OFF },
    },
    handler: (ctx: Ctx<undefined, {}>) => ok(signInOptions(ctx.app)),
  }),
  signInWithPasskey: operation({
    action: 'auth.login',
    standby: 'serves',
    summary: 'Sign in with a passkey',
    description:
      "The browser's answer: its challenge (taken once), origin, RP id, user presence and verification, the " +
      'signature by the registered key, and the signature counter, which must have gone forward (a cloned ' +
      'authenticator is refused). The session needs no second factor (user verification is one). 401 otherwise, ' +
      "audited and throttled as a failed login; on a standby the session is its own, as a password's is.",
    body: assertion,
    responses: {
      200: { description: 'Signed in', schema: loginResult },
      401: { description: 'Refused' },
      409: { description: OFF },
      429: { description: 'Too many failed sign-ins' },
    },
    handler: async (ctx: Ctx<Infer<typeof assertion>, {}>) => {
      const { id, response } = ctx.body.credential;
      const agent = ctx.headers['user-agent'] ?? null;
      const { secret, expiresAt, user } = await signInWithPasskey(ctx.app, ctx, { id, ...response }, ctx.ip, agent);
      return ok({ token: secret, expires_at: expiresAt, user: summaryOf(user) });
    },
  }),
});
