// A list's filters as a search form bound to the URL (#/rules?node_id=2&sync_state=failed): a view is a link to share,
// kept over a reload; the form is filled from the URL, and applying it writes the URL back (with the list's sort).

import { field, form, h, input, localFromUtc, utcFromLocal } from './dom.ts';
import type { PageCtx } from './main.ts';

const narrow = window.matchMedia('(max-width: 600px)');

export interface FilterSpec {
  /** The list's query parameter. */
  name: string;
  label: string;
  /** A choice among these ([value, label], or a value that is its own label), with "any" first; else free text. */
  choices?: readonly (string | readonly [string, string])[];
  placeholder?: string;
  /** A time, chosen in the person's own time zone, in the URL and the query as RFC 3339 UTC. */
  time?: boolean;
}

export interface UrlFilters {
  form: HTMLFormElement;
  /** The filters as the list's query: a name per filter, null where it is not set. */
  values(): Record<string, string | null>;
  /** The list's order, kept in the URL beside the filters. */
  sort: string | null;
  /** Puts a new order in the URL. */
  sorted(sort: string | null): void;
}

/** The filter form of a list called `what`: `apply` runs after the URL has the new filters. */
export function urlFilters(ctx: PageCtx, what: string, specs: readonly FilterSpec[], apply: () => Promise<void>) {
  const { params } = ctx;
  const controls = specs.map((spec) => {
    const value = params.get(spec.name) ?? '';
    const control = spec.choices
      ? h(
          'select',
          { name: spec.name },
          h('option', { value: '' }, 'any'),
          spec.choices.map((choice) => {
            const [v, label] = typeof choice === 'string' ? [choice, choice] : choice;
            return h('option', { value: v, selected: v === value }, label);
          }),
        )
      : spec.time
        ? input(spec.name, { type: 'datetime-local', value: localFromUtc(value || null) })
        : input(spec.name, { value, ...(spec.placeholder ? { placeholder: spec.placeholder } : {}) });
    return [spec, control] as const;
  });
  const filters: UrlFilters = {
    form: form(
      { role: 'search', class: 'filters', 'aria-label': `Filter ${what}` },
      [
        // On a phone the filters fold away until asked for (unless some are set): the list is the first screen.
        h(
          'details',
          { open: !narrow.matches || specs.some((spec) => params.get(spec.name)) },
          h('summary', {}, 'Filters'),
          h(
            'div',
            { class: 'filter-fields' },
            ...controls.map(([spec, control]) => field(spec.label, control)),
            h('button', { type: 'submit' }, 'Filter'),
          ),
        ),
      ],
      async () => {
        ctx.setParams({ ...filters.values(), sort: filters.sort });
        await apply();
      },
    ),
    values: () =>
      Object.fromEntries(
        controls.map(([spec, control]) => [spec.name, spec.time ? utcFromLocal(control.value) : control.value || null]),
      ),
    sort: params.get('sort'),
    sorted(sort) {
      filters.sort = sort;
      ctx.setParams({ ...filters.values(), sort });
    },
  };
  return filters;
}
