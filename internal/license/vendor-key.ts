// The public half of the key that signs official licenses. Its private half is kept offline
// by whoever issues licenses and is not in this repository; `--license-key` replaces it.

export const VENDOR_PUBLIC_KEY_PEM = `-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAzRE/c4WtBH+aF+sfBPxTE+HVn06e1Wrbfrkixpu2FO4=
-----END PUBLIC KEY-----
`;
