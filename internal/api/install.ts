// Install and reinstall the agent on a node over SSH. Both answer at once (202) with the
// node `installing`; progress, the log tail and the outcome show on the node.

import { masterUrl } from '../schema/net.ts';
import { requireMasterDial } from './dial.ts';
import { boolean, object, optional, type Infer } from '../schema/schema.ts';
import type { InstallMode } from '../install/installer.ts';
import { beginInstall, nodeView } from '../service/nodes.ts';
import { nodeSchema } from './nodes.ts';
import { type Ctx, idParam, operation, operations, type Reply } from './route.ts';

const installInput = object(
  {
    master_url: optional(
      masterUrl({
        description:
          'The address the agent dials, where it sends its token. Default: the setting install_master_url, else ' +
          '(when the master answers HTTPS or loopback itself) the address this request was sent to; behind a TLS ' +
          'proxy (--insecure-http) install_master_url must be set. Another address than install_master_url needs ' +
          'the scope *.',
      }),
    ),
    forget_host_key: optional(
      boolean({
        description:
          "Drop the node's pinned SSH host key before connecting, so the first key seen is pinned again: for a " +
          'node rebuilt on purpose. Audited.',
      }),
      false,
    ),
  },
  { name: 'InstallInput' },
);

function installer(mode: InstallMode) {
  return async (ctx: Ctx<Infer<typeof installInput>, {}>): Promise<Reply> => {
    const { app } = ctx;
    const id = idParam(ctx);
    const dial = requireMasterDial(ctx, ctx.body.master_url);
    const node = await beginInstall(app, ctx, id, mode, dial, ctx.body.forget_host_key);
    return { status: 202, body: nodeView(node), headers: { Location: `/api/nodes/${id}` } };
  };
}

const description = (what: string) =>
  `${what} Runs the system OpenSSH client with the node's stored key or password (or, with neither, the master's ` +
  `own SSH keys), pins the node's host key on first contact (under the node, not its address) and refuses any ` +
  `other key afterwards, also after the node's host changes, before offering a credential; forget_host_key drops ` +
  `the pin. Uses the node's Node.js 20+ if it has one, else copies the master's runtime when OS and architecture ` +
  `match. Writes install_dir/agent.mjs and agent.env (the master URL, the master's key pin when it serves HTTPS ` +
  `itself, and the agent token) and a systemd service named install_service_name (without systemd: a nohup'd ` +
  `agent with agent.pid and agent.log in install_dir, which does not survive a reboot). Answers 202 at once; the ` +
  `node shows installing, then online, or install_failed with the reason (auth_failed, host_key_changed, ` +
  `unreachable, runtime_missing, start_failed, agent_silent) in status_detail and the log in install.log_tail.`;

export const installOperations = operations({
  installNode: operation({
    action: 'node.install',
    summary: 'Install the agent on a node over SSH',
    description: description('For a node without an agent (new or install_failed); 409 otherwise.'),
    body: installInput,
    responses: {
      202: { description: 'Started; the node is installing', schema: nodeSchema },
      409: { description: 'An install is running, or the node already has an agent' },
    },
    handler: installer('install'),
  }),
  reinstallNode: operation({
    action: 'node.reinstall',
    summary: 'Reinstall the agent on a node over SSH, with a fresh agent token',
    description: description(
      'For any node not already installing. The old agent token stops working when the new agent is started; the ' +
        'agent keeps its state dir, so unsent traffic is not lost.',
    ),
    body: installInput,
    responses: {
      202: { description: 'Started; the node is installing', schema: nodeSchema },
      409: { description: 'An install is running' },
    },
    handler: installer('reinstall'),
  }),
});
