// Alerts: what fires now, the alert rules and the channels they notify (a webhook made here shows its secret once;
// any channel can be sent a test), silences for maintenance, and the delivery log.

import { alertConditions } from '../../../internal/domain/alerts.ts';
import { api, type Schema } from '../api.ts';
import { badge, button, checkboxes, checkedValues, copyButton, field, form, h, input, select, when } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { PagedTable } from '../table.ts';

type Channel = Schema<'Channel'>;

type AlertRule = Schema<'AlertRule'>;

type Alert = Schema<'Alert'>;

type Delivery = Schema<'Delivery'>;

type Silence = Schema<'Silence'>;

/** Where a channel sends, in a few words. */
function address(c: Channel): string {
  if (c.type === 'webhook') return c.url ?? '';
  if (c.type === 'telegram') return `chat ${c.chat_id}`;
  if (c.type !== 'email') return `${c.type} at ${c.host ?? '(address to set)'}`;
  return `${(c.to ?? []).join(', ')} via ${c.smtp_host}`;
}

export async function alertsPage(ctx: PageCtx): Promise<void> {
  const canWrite = ctx.can('alerts:write');
  let channels: Channel[] = [];
  let rules: AlertRule[] = [];
  const channelName = (id: number) => channels.find((c) => c.id === id)?.name ?? `#${id}`;
  const ruleName = (id: number) => rules.find((r) => r.id === id)?.name ?? `#${id}`;
  const remove = (what: string, path: string) =>
    button('Delete', () => ctx.act(`Deleted ${what}`, () => api('DELETE', path), `Delete ${what}?`), {
      class: 'danger',
    });

  // An alert rule changed in place: its name, threshold, how long, its channels (the rest as it is).
  const dialog = h('dialog', { class: 'edit', 'aria-label': 'Edit alert rule' });
  const editRule = (r: AlertRule) => {
    const name = input('name', { required: true, value: r.name });
    const threshold = input('threshold', { type: 'number', min: 1, max: 1440, value: r.threshold ?? '' });
    const forSeconds = input('for_seconds', { type: 'number', min: 0, max: 86400, value: r.for_seconds });
    const picked = checkboxes(
      'Channels',
      'channel_ids',
      channels.map((c) => c.name),
      channels.filter((c) => r.channel_ids.includes(c.id)).map((c) => c.name),
    );
    const editor = form(
      { 'aria-label': `Edit alert rule ${r.name}` },
      [
        field('Name', name),
        field('Threshold', threshold),
        field('For seconds', forSeconds),
        picked,
        h('button', { type: 'submit' }, 'Save'),
      ],
      async (el) => {
        const chosen = checkedValues(el, 'channel_ids');
        await api('PUT', `/api/alert-rules/${r.id}`, {
          body: {
            ...r,
            name: name.value,
            threshold: threshold.value === '' ? null : Number(threshold.value),
            for_seconds: Number(forSeconds.value),
            channel_ids: channels.filter((c) => chosen.includes(c.name)).map((c) => c.id),
          },
          ifMatch: `"${r.version}"`,
        });
        dialog.close();
        ctx.say(`Saved ${name.value}`);
        await ctx.reload();
      },
    );
    dialog.replaceChildren(
      editor,
      button('Cancel', () => dialog.close()),
    );
    dialog.showModal();
  };

  const firing = new PagedTable<Alert>({
    caption: 'Alerts now',
    headings: ['Alert rule', 'State', 'What', 'Since'],
    path: '/api/alerts',
    empty: 'Nothing is firing.',
    row: (a) =>
      h(
        'tr',
        {},
        h('th', { scope: 'row' }, ruleName(a.alert_rule_id)),
        h('td', {}, badge(a.state), a.muted ? ' (silenced)' : ''),
        h('td', {}, a.summary),
        h('td', {}, when(a.since)),
      ),
  });
  const ruleList = new PagedTable<AlertRule>({
    caption: 'Alert rules',
    headings: ['Name', 'Condition', 'For', 'Channels', 'Enabled', canWrite ? 'Actions' : ''],
    path: '/api/alert-rules',
    empty: 'No alert rules yet.',
    loaded: (items) => void (rules = items),
    row: (r) =>
      h(
        'tr',
        {},
        h('th', { scope: 'row' }, r.name),
        h('td', {}, r.threshold === null ? r.condition : `${r.condition} (${r.threshold})`),
        h('td', {}, `${r.for_seconds} s`),
        h('td', {}, r.channel_ids.map(channelName).join(', ')),
        h('td', {}, r.enabled ? 'yes' : 'no'),
        h(
          'td',
          { class: 'actions' },
          canWrite && [
            button('Edit', () => editRule(r)),
            button(r.enabled ? 'Disable' : 'Enable', () =>
              ctx.act(`${r.enabled ? 'Disabled' : 'Enabled'} ${r.name}`, () =>
                api('PUT', `/api/alert-rules/${r.id}`, {
                  body: { ...r, enabled: !r.enabled },
                  ifMatch: `"${r.version}"`,
                }),
              ),
            ),
            remove(`alert rule ${r.name}`, `/api/alert-rules/${r.id}`),
          ],
        ),
      ),
  });
  const channelList = new PagedTable<Channel>({
    caption: 'Channels',
    headings: ['Name', 'Type', 'Sends to', 'Failing', canWrite ? 'Actions' : ''],
    path: '/api/channels',
    empty: 'No channels yet.',
    loaded: (items) => {
      channels = items;
      // The rule form's choice of channels follows the list, keeping what was ticked.
      const ticked = channelChecks.querySelector('fieldset') ? checkedValues(ruleForm, 'channel_ids') : [];
      channelChecks.replaceChildren(
        checkboxes(
          'Channels',
          'channel_ids',
          items.map((c) => c.name),
          ticked,
        ),
      );
    },
    row: (c) =>
      h(
        'tr',
        {},
        h('th', { scope: 'row' }, c.name),
        h('td', {}, c.type),
        h('td', {}, address(c)),
        h('td', {}, c.failing_since ? `since ${when(c.failing_since)}: ${c.last_error}` : 'no'),
        h(
          'td',
          { class: 'actions' },
          canWrite &&
            button('Send a test', async () => {
              const { data } = await api<Delivery>('POST', `/api/channels/${c.id}/test`);
              ctx.say(
                data.state === 'sent' ? `Test sent to ${c.name}` : `Test to ${c.name} failed: ${data.last_error}`,
                data.state === 'sent' ? 'ok' : 'error',
              );
              await ctx.reload();
            }),
          canWrite && remove(`channel ${c.name}`, `/api/channels/${c.id}`),
        ),
      ),
  });
  const silenceList = new PagedTable<Silence>({
    caption: 'Silences',
    headings: ['Why', 'Until', canWrite ? 'Actions' : ''],
    path: '/api/silences',
    empty: 'No silences.',
    row: (s) =>
      h(
        'tr',
        {},
        h('th', { scope: 'row' }, s.comment),
        h('td', {}, when(s.ends_at)),
        h('td', { class: 'actions' }, canWrite && remove(`silence ${s.comment}`, `/api/silences/${s.id}`)),
      ),
  });
  const deliveries = new PagedTable<Delivery>({
    caption: 'Deliveries',
    headings: ['When', 'Channel', 'Outcome', 'Attempts', 'Last error'],
    path: '/api/deliveries',
    empty: 'Nothing sent yet.',
    row: (d) =>
      h(
        'tr',
        {},
        h('th', { scope: 'row' }, when(d.created_at)),
        h('td', {}, channelName(d.channel_id)),
        h('td', {}, badge(d.state)),
        h('td', {}, String(d.attempts)),
        h('td', {}, d.last_error ?? ''),
      ),
  });

  const secret = h('div');
  const channel = {
    name: input('name', { required: true }),
    type: select('type', ['webhook', 'slack', 'discord', 'teams', 'ntfy']),
    url: input('url', { type: 'url', required: true }),
    token: input('access_token', { autocomplete: 'off' }),
  };
  const tokenField = field('Access token', channel.token, 'ntfy: for a protected topic (tk_...)');
  const urlHint = h('span');
  const retyped = () => {
    const type = channel.type.value;
    tokenField.hidden = type !== 'ntfy';
    urlHint.textContent =
      type === 'webhook'
        ? 'Where notifications are POSTed, signed (Standard Webhooks)'
        : type === 'ntfy'
          ? 'The server and topic (https://ntfy.sh/TOPIC), kept secret'
          : `The webhook address ${type === 'teams' ? 'a Teams workflow' : type} gave: a credential, never shown again`;
  };
  channel.type.addEventListener('change', retyped);
  retyped();
  const channelForm = form(
    { 'aria-label': 'Add a channel' },
    [
      field('Name', channel.name),
      field('Type', channel.type),
      field('URL', channel.url),
      urlHint,
      tokenField,
      h('button', { type: 'submit' }, 'Add channel'),
    ],
    async (el) => {
      const type = channel.type.value;
      const url = channel.url.value;
      const body =
        type === 'webhook'
          ? { url }
          : type === 'ntfy'
            ? { topic_url: url, ...(channel.token.value ? { access_token: channel.token.value } : {}) }
            : { webhook_url: url };
      const { data } = await api<Channel & { secret: string | null }>('POST', '/api/channels', {
        body: { name: channel.name.value, type, ...body },
      });
      el.reset();
      retyped();
      await ctx.reload();
      const made = data.secret;
      if (made === null) return secret.replaceChildren();
      const box = h('input', { id: 'channel-secret', readonly: true, value: made, class: 'secret' });
      secret.replaceChildren(
        h(
          'section',
          { class: 'once', 'aria-label': `Channel ${data.name} added` },
          h('h2', {}, `Channel ${data.name} added`),
          h('label', { for: box.id }, 'Signing secret'),
          box,
          h('p', { class: 'hint' }, 'Shown only now: the receiver verifies signatures with it.'),
          copyButton('Copy secret', () => made),
        ),
      );
    },
  );

  const channelChecks = h('div');
  const rule = {
    name: input('name', { required: true }),
    condition: select('condition', alertConditions, 'node_offline'),
    threshold: input('threshold', { type: 'number', min: 1, max: 1440 }),
    forSeconds: input('for_seconds', { type: 'number', min: 0, max: 86400, value: '60' }),
  };
  const ruleForm = form(
    { 'aria-label': 'Add an alert rule' },
    [
      field('Name', rule.name),
      field('Condition', rule.condition),
      field('Threshold', rule.threshold, 'A percentage, days or minutes, for the conditions that take one'),
      field('For seconds', rule.forSeconds, 'How long the condition must hold before it fires'),
      channelChecks,
      h('button', { type: 'submit' }, 'Add alert rule'),
    ],
    async (el) => {
      const chosen = checkedValues(el, 'channel_ids');
      await api('POST', '/api/alert-rules', {
        body: {
          name: rule.name.value,
          condition: rule.condition.value,
          threshold: rule.threshold.value === '' ? null : Number(rule.threshold.value),
          for_seconds: Number(rule.forSeconds.value),
          channel_ids: channels.filter((c) => chosen.includes(c.name)).map((c) => c.id),
        },
      });
      ctx.say(`Added ${rule.name.value}`);
      el.reset();
      await ctx.reload();
    },
  );

  const silence = { comment: input('comment', { required: true }), hours: input('hours', { type: 'number', min: 1 }) };
  const silenceForm = form(
    { 'aria-label': 'Silence every alert' },
    [
      field('Why', silence.comment),
      field('Hours', silence.hours, 'Every alert is kept from notifying for this long (narrower ones: the API)'),
      h('button', { type: 'submit' }, 'Silence'),
    ],
    async (el) => {
      const endsAt = new Date(Date.now() + Number(silence.hours.value) * 3_600_000).toISOString();
      await api('POST', '/api/silences', { body: { comment: silence.comment.value, ends_at: endsAt } });
      ctx.say('Silenced');
      el.reset();
      await ctx.reload();
    },
  );

  const adding = (summary: string, content: HTMLElement) =>
    canWrite ? h('details', { class: 'create' }, h('summary', {}, summary), content) : '';
  // One part of the alerts at a time, chosen by a tab kept in the URL (#/alerts?tab=channels).
  const parts: [string, string, (HTMLElement | string)[]][] = [
    ['now', 'Now', [firing.el]],
    ['rules', 'Rules', [adding('Add an alert rule', ruleForm), ruleList.el]],
    ['channels', 'Channels', [adding('Add a channel', channelForm), secret, channelList.el]],
    ['silences', 'Silences', [adding('Silence alerts', silenceForm), silenceList.el]],
    ['deliveries', 'Deliveries', [deliveries.el]],
  ];
  const chosen = parts.find(([key]) => key === ctx.params.get('tab'))?.[0] ?? 'now';
  const panels = parts.map(([key, , content]) =>
    h('section', { role: 'tabpanel', id: `alerts-${key}`, hidden: key !== chosen }, ...content),
  );
  const tabs = parts.map(([key, title], i) => {
    const tab = h(
      'button',
      {
        type: 'button',
        role: 'tab',
        'aria-selected': String(key === chosen),
        'aria-controls': `alerts-${key}`,
      },
      title,
    );
    tab.addEventListener('click', () => {
      tabs.forEach((other, j) => other.setAttribute('aria-selected', String(i === j)));
      panels.forEach((panel, j) => (panel.hidden = i !== j));
      ctx.setParams({ tab: key === 'now' ? null : key });
    });
    return tab;
  });
  ctx.main.append(h('div', { role: 'tablist', class: 'tabs', 'aria-label': 'Alerts' }, ...tabs), ...panels, dialog);
  // Channels and rules first: the other lists name them.
  await ctx.live(
    async () => {
      await channelList.load();
      await ruleList.load();
      await Promise.all([firing.load(), silenceList.load(), deliveries.load()]);
    },
    // What the journal tells of alerts: alert.firing and alert.resolved (the console goes by the type's first word).
    ['alert'],
    5000,
  );
}
