// Telegram's Bot API: a notification is a sendMessage call of the channel's bot to its chat. The API's address is
// the channel's to set (a local Bot API server, or a stand-in in tests); the bot's token is in the path (as the API
// wants it; the API checks it is digits, a colon and base64url), so no error or log line here carries the address.

import type { TargetPolicy } from '../domain/rules.ts';
import { postJson } from './post.ts';

export const TELEGRAM_API = 'https://api.telegram.org';

/** Sends `text` to `chatId` as the bot of `token`. Throws `NotSent`. */
export function sendTelegram(
  apiBase: string,
  token: string,
  chatId: string,
  text: string,
  policy: TargetPolicy,
  signal?: AbortSignal,
): Promise<void> {
  const url = `${apiBase.replace(/\/+$/, '')}/bot${token}/sendMessage`;
  return postJson(url, JSON.stringify({ chat_id: chatId, text, disable_web_page_preview: true }), {}, policy, signal);
}
