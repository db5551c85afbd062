// What a username is, wherever one comes from: a request, or a claim of the identity provider's.

export const USERNAME = /^[A-Za-z0-9][A-Za-z0-9._@-]*$/;
export const USERNAME_MAX = 64;
export const USERNAME_HINT = 'must start with a letter or digit and contain only letters, digits and . _ @ -';
