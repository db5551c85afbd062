// A rule's allow_hours as one line of text for its form: `Europe/Berlin: mon-fri 08:00-18:00; sat,sun 10:00-14:00`,
// the zone, then windows separated by `;`, each its days (a range or a list) and its times. The API checks the rest
// (the zone, the times) and says which window is wrong.

import type { components } from './api.gen.ts';

type AllowHours = components['schemas']['AllowHours'];
type Day = AllowHours['windows'][number]['days'][number];

const DAYS: readonly Day[] = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'];

/** The days a text names: `mon-fri`, `sat,sun`, `tue`. */
function daysOf(text: string): Day[] {
  const days = new Set<Day>();
  for (const part of text.split(',')) {
    const [first, last = first] = part.split('-') as [Day, Day?];
    const [from, to] = [DAYS.indexOf(first), DAYS.indexOf(last!)];
    if (from < 0 || to < 0) throw new Error(`Allowed hours: "${part}" is no day (mon, tue, ... sun, or mon-fri)`);
    for (let i = from; ; i = (i + 1) % 7) {
      days.add(DAYS[i]!);
      if (i === to) break;
    }
  }
  return DAYS.filter((day) => days.has(day));
}

/** The text's allow_hours; null for none. Throws, saying what is wrong, for text it cannot read. */
export function parseHours(text: string): AllowHours | null {
  const trimmed = text.trim();
  if (trimmed === '') return null;
  // A zone has neither spaces nor colons: what comes before the first colon is one only if it has none.
  const zoned = /^([^\s:]+)\s*:(.*)$/.exec(trimmed);
  if (!zoned) throw new Error('Allowed hours: start with the time zone, as in "Europe/Berlin: mon-fri 08:00-18:00"');
  const windows = zoned[2]!.split(';').map((window) => {
    const match = /^\s*(\S+)\s+(\d\d:\d\d)-(\d\d:\d\d)\s*$/.exec(window);
    if (!match) throw new Error(`Allowed hours: "${window.trim()}" is not "DAYS HH:MM-HH:MM"`);
    return { days: daysOf(match[1]!), from: match[2]!, to: match[3]! };
  });
  return { zone: zoned[1]!, windows };
}

/** `hours` as parseHours reads it. */
export function hoursText(hours: AllowHours | null | undefined): string {
  if (!hours) return '';
  return `${hours.zone}: ${hours.windows.map((w) => `${w.days.join(',')} ${w.from}-${w.to}`).join('; ')}`;
}
