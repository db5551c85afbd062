// Mail over SMTP (RFC 5321), as small as a notification needs: one message to a few recipients, over TLS from the
// start (`tls`, port 465) or upgraded with STARTTLS (RFC 3207; required, never skipped when the server does not offer
// it), with AUTH PLAIN or LOGIN (RFC 4954) when the channel has a user. The server's certificate is verified, against
// the system's CAs or the channel's own. Every byte of the message is written here: no header takes a line break,
// lines of the body are CRLF and dot-stuffed.

import { connect as tcpConnect, type Socket } from 'node:net';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import type { TargetPolicy } from '../domain/rules.ts';
import { failureOf, guardedLookup, hostRefusal, NotSent, POST_TIMEOUT_MS } from './post.ts';

export const smtpSecurities = ['starttls', 'tls'] as const;
export type SmtpSecurity = (typeof smtpSecurities)[number];

export interface MailServer {
  host: string;
  port: number;
  security: SmtpSecurity;
  username: string | null;
  /** PEM of the CA (or certificate) to trust for this server instead of the system's; null: the system's. */
  ca: string | null;
}

export interface Mail {
  from: string;
  to: readonly string[];
  subject: string;
  text: string;
  /** The Message-ID's left part: the same for every attempt of one notification. */
  id: string;
  date: Date;
}

/** One reply: its code, and its lines' text. */
interface Reply {
  code: number;
  lines: string[];
}

/** A conversation on one socket: commands out, replies in, each within the deadline of the whole. */
class Conversation {
  private buffer = '';
  private waiting: ((reply: Reply | Error) => void) | null = null;
  private failure: Error | null = null;

  constructor(public socket: Socket | TLSSocket) {
    this.listen(socket);
  }

  /** Goes on on `socket` (the same connection, after STARTTLS): the plain socket's bytes are TLS's from now on. */
  upgrade(socket: TLSSocket): void {
    this.socket.removeAllListeners('data');
    this.socket = socket;
    this.buffer = '';
    this.listen(socket);
  }

  private listen(socket: Socket | TLSSocket): void {
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      this.buffer += chunk;
      if (this.buffer.length > 64 * 1024) return this.fail(new NotSent('the mail server sent a reply too long'));
      this.deliver();
    });
    socket.on('error', (error) =>
      this.fail(
        error instanceof NotSent ? error : new NotSent(`the mail server connection failed: ${failureOf(error)}`),
      ),
    );
    socket.on('close', () => this.fail(new NotSent('the mail server closed the connection')));
  }

  private fail(error: Error): void {
    this.failure ??= error;
    const waiting = this.waiting;
    this.waiting = null;
    waiting?.(error);
  }

  private deliver(): void {
    if (!this.waiting) return;
    const lines = this.buffer.split('\r\n');
    const done = lines.findIndex((line) => /^\d{3}( |$)/.test(line));
    if (done < 0 || done === lines.length - 1) return;
    const reply = { code: Number(lines[done]!.slice(0, 3)), lines: lines.slice(0, done + 1).map((l) => l.slice(4)) };
    this.buffer = lines.slice(done + 1).join('\r\n');
    const waiting = this.waiting;
    this.waiting = null;
    waiting(reply);
  }

  /** The next reply; throws `NotSent` unless its code is `expected`. */
  read(expected: number, what: string): Promise<Reply> {
    return new Promise((resolve, reject) => {
      if (this.failure) return reject(this.failure);
      this.waiting = (reply) => {
        if (reply instanceof Error) return reject(reply);
        if (reply.code !== expected)
          return reject(new NotSent(`the mail server refused ${what}: ${reply.code} ${reply.lines.join(' ')}`));
        resolve(reply);
      };
      this.deliver();
    });
  }

  async command(line: string, expected: number, what: string): Promise<Reply> {
    this.socket.write(`${line}\r\n`);
    return this.read(expected, what);
  }
}

/** What EHLO says the server offers, upper-cased: `STARTTLS`, `AUTH PLAIN LOGIN`, ... */
function extensions(reply: Reply): string[] {
  return reply.lines.slice(1).map((line) => line.toUpperCase());
}

/** A header value: on one line, whatever it was given. */
function oneLine(value: string): string {
  return value.replace(/[\r\n]+/g, ' ');
}

/** The message as sent after DATA: headers, a blank line, the body in CRLF lines, dot-stuffed, and the end mark. */
export function messageData(mail: Mail, domain: string): string {
  const headers = [
    `From: ${oneLine(mail.from)}`,
    `To: ${mail.to.map(oneLine).join(', ')}`,
    `Subject: =?UTF-8?B?${Buffer.from(oneLine(mail.subject)).toString('base64')}?=`,
    `Date: ${mail.date.toUTCString().replace('GMT', '+0000')}`,
    `Message-ID: <${oneLine(mail.id)}@${domain}>`,
    'MIME-Version: 1.0',
    'Content-Type: text/plain; charset=utf-8',
    'Content-Transfer-Encoding: 8bit',
  ];
  const body = mail.text.split(/\r?\n|\r/).map((line) => (line.startsWith('.') ? `.${line}` : line));
  return `${[...headers, '', ...body].join('\r\n')}\r\n.\r\n`;
}

/** Sends `mail` through `server`, logging in with `password` if it has a user. Throws `NotSent`. */
export async function sendMail(
  server: MailServer,
  password: string | null,
  mail: Mail,
  policy: TargetPolicy,
  signal?: AbortSignal,
): Promise<void> {
  const refused = hostRefusal(server.host, policy);
  if (refused) throw new NotSent(`the mail server ${refused}`, false);
  const secure = { servername: server.host, ...(server.ca ? { ca: server.ca } : {}) };
  const socket =
    server.security === 'tls'
      ? tlsConnect({ host: server.host, port: server.port, lookup: guardedLookup(policy), ...secure })
      : tcpConnect({ host: server.host, port: server.port, lookup: guardedLookup(policy) });
  const deadline = setTimeout(
    () => socket.destroy(new NotSent(`no end within ${POST_TIMEOUT_MS / 1000} s`)),
    POST_TIMEOUT_MS,
  );
  const abort = () => socket.destroy(new NotSent('the master is stopping'));
  signal?.addEventListener('abort', abort, { once: true });
  try {
    const talk = new Conversation(socket);
    await talk.read(220, 'the connection');
    let hello = await talk.command('EHLO portplane', 250, 'EHLO');
    if (server.security === 'starttls') {
      if (!extensions(hello).includes('STARTTLS')) throw new NotSent('the mail server does not offer STARTTLS');
      await talk.command('STARTTLS', 220, 'STARTTLS');
      const upgraded = tlsConnect({ socket, ...secure });
      talk.upgrade(upgraded);
      await new Promise<void>((resolve, reject) => {
        upgraded.once('secureConnect', resolve);
        upgraded.once('error', (error) => reject(new NotSent(`TLS with the mail server failed: ${failureOf(error)}`)));
      });
      hello = await talk.command('EHLO portplane', 250, 'EHLO');
    }
    if (server.username !== null) await logIn(talk, extensions(hello), server.username, password ?? '');
    await talk.command(`MAIL FROM:<${oneLine(mail.from)}>`, 250, 'the sender');
    for (const to of mail.to) await talk.command(`RCPT TO:<${oneLine(to)}>`, 250, `the recipient ${to}`);
    await talk.command('DATA', 354, 'DATA');
    talk.socket.write(messageData(mail, 'portplane'));
    await talk.read(250, 'the message');
    talk.socket.write('QUIT\r\n');
  } catch (error) {
    throw error instanceof NotSent ? error : new NotSent(failureOf(error));
  } finally {
    clearTimeout(deadline);
    signal?.removeEventListener('abort', abort);
    socket.end();
  }
}

async function logIn(talk: Conversation, offered: string[], username: string, password: string): Promise<void> {
  const mechanisms =
    offered
      .find((line) => line.startsWith('AUTH '))
      ?.split(' ')
      .slice(1) ?? [];
  const base64 = (text: string) => Buffer.from(text).toString('base64');
  if (mechanisms.includes('PLAIN')) {
    await talk.command(`AUTH PLAIN ${base64(`\0${username}\0${password}`)}`, 235, 'the login');
  } else if (mechanisms.includes('LOGIN')) {
    await talk.command('AUTH LOGIN', 334, 'AUTH LOGIN');
    await talk.command(base64(username), 334, 'the user name');
    await talk.command(base64(password), 235, 'the login');
  } else throw new NotSent('the mail server offers no login this master can do (PLAIN, LOGIN)');
}
