// Passkeys in the browser: the master's WebAuthn options turned into what navigator.credentials takes (binary parts
// arrive and leave as base64url), for registering one and for signing in with one.

import { api, type Schema } from './api.ts';

function encoded(buffer: ArrayBuffer): string {
  let text = '';
  for (const byte of new Uint8Array(buffer)) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function bytes(text: string): Uint8Array<ArrayBuffer> {
  const binary = atob(text.replace(/-/g, '+').replace(/_/g, '/'));
  return Uint8Array.from(binary, (char) => char.charCodeAt(0));
}

interface CreationOptions {
  challenge: string;
  rp: { id: string; name: string };
  user: { id: string; name: string; displayName: string };
  pubKeyCredParams: { type: 'public-key'; alg: number }[];
  timeout: number;
  attestation: AttestationConveyancePreference;
  authenticatorSelection: AuthenticatorSelectionCriteria;
  excludeCredentials: { type: 'public-key'; id: string }[];
}

/** Registers a passkey of this device as `name`. */
export async function addPasskey(name: string): Promise<Schema<'Passkey'>> {
  const { data: options } = await api<CreationOptions>('POST', '/api/auth/passkeys/options');
  const credential = (await navigator.credentials.create({
    publicKey: {
      ...options,
      challenge: bytes(options.challenge),
      user: { ...options.user, id: bytes(options.user.id) },
      excludeCredentials: options.excludeCredentials.map((excluded) => ({ ...excluded, id: bytes(excluded.id) })),
    },
  })) as PublicKeyCredential | null;
  if (!credential) throw new Error('No passkey was made.');
  const response = credential.response as AuthenticatorAttestationResponse;
  const { data } = await api<Schema<'Passkey'>>('POST', '/api/auth/passkeys', {
    body: {
      name,
      credential: {
        id: credential.id,
        response: {
          clientDataJSON: encoded(response.clientDataJSON),
          attestationObject: encoded(response.attestationObject),
        },
      },
    },
  });
  return data;
}

/** Signs in with a passkey the authenticator offers: the session token. */
export async function passkeySignIn(): Promise<string> {
  const { data: options } = await api<{ challenge: string; rpId: string; timeout: number }>(
    'POST',
    '/api/auth/passkeys/sign-in/options',
  );
  const credential = (await navigator.credentials.get({
    publicKey: { ...options, challenge: bytes(options.challenge), userVerification: 'required' },
  })) as PublicKeyCredential | null;
  if (!credential) throw new Error('No passkey was chosen.');
  const response = credential.response as AuthenticatorAssertionResponse;
  const { data } = await api<{ token: string }>('POST', '/api/auth/passkeys/sign-in', {
    body: {
      credential: {
        id: credential.id,
        response: {
          clientDataJSON: encoded(response.clientDataJSON),
          authenticatorData: encoded(response.authenticatorData),
          signature: encoded(response.signature),
          ...(response.userHandle ? { userHandle: encoded(response.userHandle) } : {}),
        },
      },
    },
  });
  return data.token;
}
