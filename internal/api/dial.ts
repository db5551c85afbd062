// Where agents dial this master, and by which pin they know it: the setting
// install_master_url (the operator's, which needs `*`), else an install body's master_url
// (which needs `*` too unless it is that same address), else, where the master answers itself,
// the address the request reached, with the scheme the master serves. Behind a TLS proxy
// (--insecure-http) there is no such default: the address is the operator's to set.

import { grants } from '../auth/scopes.ts';
import { validationFailed } from '../errors/errors.ts';
import type { MasterDial } from '../install/agent-env.ts';
import { isLoopback, masterOrigin } from '../schema/net.ts';
import { releaseKeyText } from '../release/signature.ts';
import type { Ctx } from './route.ts';
import { missingScope } from '../service/write.ts';

type DialCtx = Pick<Ctx<unknown, unknown>, 'app' | 'headers' | 'caller'>;

/** What an install may be told to dial besides install_master_url, and the scope that takes. */
export const INSTALL_ELSEWHERE = [
  { scope: '*', when: 'master_url names another address than the setting install_master_url' },
] as const;

/**
 * The dial for agents of this request's master, or why there is none. Throws `insufficient_scope` for a `given`
 * address other than install_master_url from a caller without `*`: the agent would send its token there.
 */
function dialOrProblem(ctx: DialCtx, given?: string): MasterDial | string {
  const { app } = ctx;
  const configured = app.settings.get('install_master_url');
  if (given && masterOrigin(given) !== masterOrigin(configured) && !grants(ctx.caller.scopes, '*'))
    throw missingScope('*', `sending an agent to ${masterOrigin(given) ?? given}, not install_master_url`);
  if (!given && !configured && app.insecureHttp)
    return (
      'this master serves plain HTTP behind a TLS proxy (--insecure-http), so it cannot tell where agents should ' +
      "dial: set install_master_url to the proxy's https:// address (needs *)"
    );
  const origin = masterOrigin(given || configured || `${app.tls ? 'https' : 'http'}://${ctx.headers.host ?? ''}`);
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
  const pin = app.tls && url.protocol === 'https:' ? app.tls.pin : null;
  return { masterUrl: origin, pin, releaseKeys: app.releaseKeys.map(releaseKeyText) };
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
