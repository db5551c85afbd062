// Where agents dial this master, and by which pin they know it: the install body's
// master_url, else the setting install_master_url, else the address the request reached,
// with the scheme the master serves.

import { validationFailed } from '../http/problem.ts';
import type { MasterDial } from '../install/agent-env.ts';
import { masterOrigin } from '../schema/net.ts';
import type { Ctx } from './route.ts';

/** The dial for agents of this request's master, or null when the request does not say where that is. */
export function masterDial(ctx: Pick<Ctx<unknown, unknown>, 'app' | 'headers'>, given?: string): MasterDial | null {
  const { app } = ctx;
  const origin = masterOrigin(given || app.settings.get('install_master_url') || `${app.tls ? 'https' : 'http'}://${ctx.headers.host ?? ''}`);
  if (origin === null) return null;
  // The pin names the master's own key: it holds only where the master itself answers TLS.
  return { masterUrl: origin, pin: app.tls && origin.startsWith('https:') ? app.tls.pin : null };
}

/** As masterDial, for an install, which cannot go on without one. Throws `validation_failed`. */
export function requireMasterDial(ctx: Pick<Ctx<unknown, unknown>, 'app' | 'headers'>, given?: string): MasterDial {
  const dial = masterDial(ctx, given);
  if (!dial) throw validationFailed([{ pointer: '#/master_url', detail: 'cannot tell from this request where agents should dial; give master_url or set install_master_url' }]);
  return dial;
}
