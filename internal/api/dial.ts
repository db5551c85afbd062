// Where agents dial this master, and by which pin they know it: the install body's
// master_url, else the setting install_master_url, else the address the request reached,
// with the scheme the master serves.

import { validationFailed } from '../errors/errors.ts';
import type { MasterDial } from '../install/agent-env.ts';
import { isLoopback, masterOrigin } from '../schema/net.ts';
import type { Ctx } from './route.ts';

type DialCtx = Pick<Ctx<unknown, unknown>, 'app' | 'headers'>;

/** The dial for agents of this request's master, or why there is none. */
function dialOrProblem(ctx: DialCtx, given?: string): MasterDial | string {
  const { app } = ctx;
  const origin = masterOrigin(
    given || app.settings.get('install_master_url') || `${app.tls ? 'https' : 'http'}://${ctx.headers.host ?? ''}`,
  );
  if (origin === null)
    return 'cannot tell from this request where agents should dial; give master_url or set install_master_url';
  const url = new URL(origin);
  // An agent sends its token in clear only where the operator chose that for the master too.
  if (url.protocol === 'http:' && !isLoopback(url.hostname.replace(/^\[|\]$/g, '')) && !app.insecureHttp) {
    return (
      `agents do not send their token in clear across the network: give an https:// ` +
      'address' +
      (app.tls ? ' (this master serves HTTPS)' : ', or run the master with --insecure-http behind a TLS proxy')
    );
  }
  // The pin names the master's own key: it holds only where the master itself answers TLS.
  return { masterUrl: origin, pin: app.tls && url.protocol === 'https:' ? app.tls.pin : null };
}

/** The dial for agents of this request's master, or null when there is none to give. */
export function masterDial(ctx: DialCtx, given?: string): MasterDial | null {
  const dial = dialOrProblem(ctx, given);
  return typeof dial === 'string' ? null : dial;
}

/** As masterDial, for an install, which cannot go on without one. Throws `validation_failed`. */
export function requireMasterDial(ctx: DialCtx, given?: string): MasterDial {
  const dial = dialOrProblem(ctx, given);
  if (typeof dial === 'string') throw validationFailed([{ pointer: '#/master_url', detail: dial }]);
  return dial;
}
