// A second factor on the wire (operations in service/second-factor.ts): TOTP enrolled and turned off from one's own
// login session, and by an operator for a user who lost their device.

import { TOTP_DIGITS, TOTP_STEP_SECONDS, RECOVERY_CODES } from '../auth/totp.ts';
import { object, secret, string, type Infer } from '../schema/schema.ts';
import { beginTotp, confirmTotp, removeOwnTotp, removeTotp } from '../service/second-factor.ts';
import { transact } from '../service/write.ts';
import { record } from './common.ts';
import { type Ctx, idParam, noContent, ok, operation, operations } from './route.ts';

const enrolment = record('TotpEnrolment', {
  secret: secret({
    type: 'string',
    description: 'The secret in base32 (RFC 4648), for typing into an authenticator app; shown only here.',
  }),
  otpauth_uri: secret({
    type: 'string',
    description: 'The same as an otpauth://totp/ URI (a QR code of it is what authenticator apps scan).',
  }),
});

const confirmInput = object(
  {
    code: string({
      min: TOTP_DIGITS,
      max: TOTP_DIGITS,
      pattern: /^[0-9]+$/,
      patternHint: `must be the ${TOTP_DIGITS} digits the authenticator app shows`,
      // Not marked secret: it is used up by this request, and `code` names a problem's code wherever one is kept.
    }),
  },
  { name: 'TotpConfirm' },
);

const recoveryCodes = record('RecoveryCodes', {
  recovery_codes: secret({
    type: 'array',
    items: { type: 'string' },
    description:
      `${RECOVERY_CODES} codes (xxxx-xxxx-xxxx-xxxx), each standing in for a code once, for when the device is ` +
      'lost; shown only here, kept hashed.',
  }),
});

const disableInput = object(
  { password: string({ min: 1, max: 1024, secret: true, description: "The caller's password." }) },
  { name: 'TotpDisable' },
);

export const secondFactorOperations = operations({
  beginTotp: operation({
    tenants: true,
    action: 'auth.totp_begin',
    summary: 'Start enrolling a TOTP second factor',
    description:
      `A new secret for an authenticator app (RFC 6238: HMAC-SHA1, ${TOTP_STEP_SECONDS} s, ${TOTP_DIGITS} ` +
      'digits); nothing changes at login until POST /api/auth/totp/confirm takes a code of it. Asking again ' +
      'replaces a secret not confirmed yet; 409 while one is on. A login session only (403 for an API token).',
    responses: { 200: { description: 'The secret', schema: enrolment }, 409: { description: 'One is on' } },
    handler: async (ctx: Ctx<undefined, {}>) => ok(await beginTotp(ctx.app, ctx, ctx.caller)),
  }),
  confirmTotp: operation({
    tenants: true,
    action: 'auth.totp_confirm',
    summary: 'Turn the TOTP second factor on with a code of it',
    description:
      'From now on a login needs totp beside the password: a code (within a step of the clock, each once) or a ' +
      'recovery code. Answers the recovery codes, once. A wrong code is 422 and counts as a failed login (429 ' +
      'past the limits).',
    body: confirmInput,
    responses: {
      200: { description: 'On; the recovery codes', schema: recoveryCodes },
      409: { description: 'None being enrolled' },
      422: { description: 'Not the current code' },
    },
    handler: async (ctx: Ctx<Infer<typeof confirmInput>, {}>) =>
      ok({ recovery_codes: await confirmTotp(ctx.app, ctx, ctx.caller, ctx.ip, ctx.body.code) }),
  }),
  disableTotp: operation({
    tenants: true,
    action: 'auth.totp_disable',
    summary: "Turn the caller's second factor off",
    description:
      'Needs the password (422 when wrong, counted as a failed login and throttled as one, 429): a stolen session ' +
      'alone cannot. 404 without one.',
    body: disableInput,
    responses: {
      204: { description: 'Off' },
      404: { description: 'None is on' },
      422: { description: 'Not the password' },
      429: { description: "Too many wrong passwords, or the caller's write budget is spent (rate_limited)." },
    },
    handler: async (ctx: Ctx<Infer<typeof disableInput>, {}>) => {
      await removeOwnTotp(ctx.app, ctx, ctx.caller, ctx.ip, ctx.body.password);
      return noContent();
    },
  }),
  removeUserTotp: operation({
    action: 'user.totp_remove',
    summary: "Turn a user's second factor off (a lost device)",
    description:
      'They sign in with their password alone until they enrol again. 404 without one; 412 for an If-Match that ' +
      "is not the user's ETag.",
    responses: { 204: { description: 'Off' }, 404: { description: 'The user has none' } },
    handler: async (ctx: Ctx<undefined, {}>) => {
      await transact(ctx.app, ctx, (change) => removeTotp(ctx.app, change, idParam(ctx), ctx.headers['if-match']));
      return noContent();
    },
  }),
});
