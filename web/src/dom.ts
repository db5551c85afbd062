// Building the page: elements from plain data (text is always text, never parsed as HTML),
// labelled form fields with a slot for their error, and the API's problems shown next to the
// fields they name.

import { ApiError } from './api.ts';

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | null | undefined | ((event: any) => void)>;

function apply(el: Element, attrs: Attrs, children: (Child | Child[])[]): void {
  for (const [name, value] of Object.entries(attrs)) {
    if (typeof value === 'function') el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, '');
    else if (value !== false && value !== null && value !== undefined) el.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(typeof child === 'object' ? child : document.createTextNode(String(child)));
  }
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  apply(el, attrs, children);
  return el;
}

export function svg(tag: string, attrs: Attrs = {}, ...children: (Child | Child[])[]): SVGElement {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  apply(el, attrs, children);
  return el;
}

let ids = 0;
type Control = HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;

/** A control with its label, an optional hint, and the slot its error goes to. */
export function field(label: string, control: Control, hint?: string): HTMLElement {
  control.id ||= `f${++ids}`;
  const error = h('p', { class: 'error', id: `${control.id}-error` });
  const described = [error.id];
  const hintEl = hint ? h('p', { class: 'hint', id: `${control.id}-hint` }, hint) : null;
  if (hintEl) described.unshift(hintEl.id);
  control.setAttribute('aria-describedby', described.join(' '));
  const wrap = control instanceof HTMLInputElement && control.type === 'checkbox' ? 'field check' : 'field';
  return h('div', { class: wrap }, h('label', { for: control.id }, label), control, hintEl, error);
}

export function input(name: string, attrs: Attrs = {}): HTMLInputElement {
  return h('input', { name, type: 'text', ...attrs });
}

export function select(name: string, options: readonly string[], value?: string): HTMLSelectElement {
  return h(
    'select',
    { name },
    options.map((option) => h('option', { value: option, selected: option === value }, option)),
  );
}

/** A group of checkboxes sharing `name`, in a fieldset whose legend names them. */
export function checkboxes(legend: string, name: string, values: readonly string[], checked: readonly string[] = []) {
  return h(
    'fieldset',
    { class: 'checks', 'data-field': name },
    h('legend', {}, legend),
    values.map((value) =>
      h('label', {}, h('input', { type: 'checkbox', name, value, checked: checked.includes(value) }), ' ', value),
    ),
    h('p', { class: 'error', id: `${name}-${++ids}-error` }),
  );
}

export function checkedValues(form: HTMLFormElement, name: string): string[] {
  return [...form.querySelectorAll<HTMLInputElement>(`input[name="${name}"]:checked`)].map((box) => box.value);
}

/** A form whose submit runs `action`; while it runs the form is busy, and what it throws is shown in it. */
export function form(attrs: Attrs, children: Child[], action: (form: HTMLFormElement) => Promise<void>) {
  const alert = h('div', { class: 'alert', role: 'alert' });
  const el = h('form', { novalidate: true, ...attrs }, alert, children);
  el.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearProblems(el);
    el.setAttribute('aria-busy', 'true');
    try {
      await action(el);
    } catch (error) {
      showProblem(el, error);
    } finally {
      el.removeAttribute('aria-busy');
    }
  });
  return el;
}

function clearProblems(form: HTMLFormElement): void {
  for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
  for (const el of form.querySelectorAll('.error, .alert')) el.textContent = '';
}

/** The field a pointer such as `#/targets/1` names, by its top-level name. */
function fieldFor(form: HTMLFormElement, pointer: string): { control: Element; error: Element } | null {
  const name = pointer.replace(/^#\/|^\?/, '').split('/')[0] ?? '';
  const group = form.querySelector(`[data-field="${CSS.escape(name)}"]`);
  if (group) return { control: group, error: group.querySelector('.error')! };
  const control = form.querySelector(`[name="${CSS.escape(name)}"]`);
  const error = control ? form.querySelector(`#${CSS.escape(control.id)}-error`) : null;
  return control && error ? { control, error } : null;
}

/** Each error the API named a field for goes next to that field; the rest, and the detail, at the form's top. */
export function showProblem(form: HTMLFormElement, error: unknown): void {
  const alert = form.querySelector('.alert')!;
  if (!(error instanceof ApiError)) {
    alert.textContent = String(error instanceof Error ? error.message : error);
    return;
  }
  const unplaced: string[] = [];
  let first: HTMLElement | null = null;
  for (const item of error.problem.errors ?? []) {
    const place = fieldFor(form, item.pointer);
    if (!place) {
      unplaced.push(`${item.pointer.replace(/^#\/|^\?/, '')}: ${item.detail}`);
      continue;
    }
    place.control.setAttribute('aria-invalid', 'true');
    place.error.textContent = place.error.textContent ? `${place.error.textContent}; ${item.detail}` : item.detail;
    first ??= place.control as HTMLElement;
  }
  alert.textContent = [error.problem.detail, ...unplaced].join('. ');
  (first ?? (alert as HTMLElement)).focus?.();
}

export function button(label: string, onclick: () => unknown, attrs: Attrs = {}): HTMLButtonElement {
  return h('button', { type: 'button', onclick, ...attrs }, label);
}

/** A button that copies `text()` to the clipboard and says so. */
export function copyButton(label: string, text: () => string): HTMLButtonElement {
  const button = h('button', { type: 'button' }, label);
  button.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(text());
      button.textContent = 'Copied';
    } catch {
      // The clipboard needs a secure context and the person's leave; the text stays selectable.
      button.textContent = 'Copy it by hand';
    }
    setTimeout(() => (button.textContent = label), 2000);
  });
  return button;
}

export function when(iso: string | null | undefined): string {
  if (!iso) return '—';
  return new Date(iso).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' });
}

/** A datetime-local value (the person's own time zone) as RFC 3339 UTC, or null when empty. */
export function utcFromLocal(local: string): string | null {
  return local ? new Date(local).toISOString().replace(/\.\d{3}Z$/, 'Z') : null;
}

/** A UTC time as a datetime-local value in the person's own time zone. */
export function localFromUtc(iso: string | null): string {
  if (!iso) return '';
  const at = new Date(iso);
  return new Date(at.getTime() - at.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
}

/** A count as the reader's locale writes it (2,002; 2 002; 2.002). */
export function count(n: number): string {
  return n.toLocaleString();
}

/** What a rule or node carries now, in a few words: `2 open · 1.3 MiB/s in · 1.3 MiB/s out`. */
export function liveText(live: { open: number; rate_in: number; rate_out: number }): string {
  return `${count(live.open)} open · ${bytes(live.rate_in)}/s in · ${bytes(live.rate_out)}/s out`;
}

export function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) ((n /= 1024), i++);
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

/** A small coloured label for a state, e.g. a node's status or a rule's sync state. */
export function badge(state: string): HTMLElement {
  return h('span', { class: `badge s-${state.replace(/[^a-z_]/g, '')}` }, state.replace('_', ' '));
}

/** Lines (or commas) of a text box as a list, blanks left out. */
export function listOf(text: string): string[] {
  return text
    .split(/[\n,]/)
    .map((item) => item.trim())
    .filter(Boolean);
}
