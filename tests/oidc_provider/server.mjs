// A real OpenID Connect provider (panva's oidc-provider) on loopback, for the portal's sign-in tests.
// Started by tests/plugins/oidc.py:  node server.mjs CONFIG.json
// CONFIG: {"port", "issuer", "clients": [oidc-provider client metadata], "users_file"}.
// USERS_FILE: {"<sub>": {"password": "...", "claims": {"email", "email_verified", "groups", ...}}},
// read at every request, so a test changes a person's groups by rewriting it.
// PKCE is required of every client (S256 only), as a provider that does not check it cannot show
// that the portal sends it.
import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';

import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const users = () => JSON.parse(readFileSync(config.users_file, 'utf8'));
const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const page = (title, body) => `<!DOCTYPE html><html><head><meta charset="utf-8"><title>${escape(title)}</title></head>
<body><h1>${escape(title)}</h1>${body}</body></html>`;

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const provider = new Provider(config.issuer, {
  clients: config.clients,
  jwks: { keys: [{ ...privateKey.export({ format: 'jwk' }), kid: 'test-key', use: 'sig', alg: 'RS256' }] },
  cookies: { keys: ['hdrag-test-oidc-provider-cookie-key'] },
  pkce: { required: () => true },
  scopes: ['openid', 'offline_access', 'profile', 'email'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username', 'groups'],
  },
  features: {
    devInteractions: { enabled: false },
    rpInitiatedLogout: {
      enabled: true,
      logoutSource: async (ctx, form) => {
        ctx.body = page('Sign out of the test provider?',
          `${form}<button autofocus type="submit" form="op.logoutForm" value="yes" name="logout">Yes, sign me out</button>`);
      },
      postLogoutSuccessSource: async (ctx) => { ctx.body = page('Signed out of the test provider', ''); },
    },
  },
  findAccount: async (ctx, sub) => {
    const user = users()[sub];
    return user && { accountId: sub, claims: async () => ({ sub, ...user.claims }) };
  },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  renderError: async (ctx, out) => { ctx.type = 'html'; ctx.body = page('Provider error', `<pre>${escape(JSON.stringify(out))}</pre>`); },
});

async function consent(req, res, details) {
  // The portal is a first-party client: grant what it asks for, without a consent page.
  const { prompt: { details: missing }, params, session: { accountId } } = details;
  const grant = details.grantId ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId, clientId: params.client_id });
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes || {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { consent: details.grantId ? {} : { grantId } },
    { mergeWithLastSubmission: true });
}

async function readForm(req) {
  let body = '';
  for await (const chunk of req) body += chunk;
  return Object.fromEntries(new URLSearchParams(body));
}

async function interaction(req, res, uid) {
  const details = await provider.interactionDetails(req, res);
  if (details.prompt.name === 'consent') return consent(req, res, details);
  let error = '';
  if (req.method === 'POST') {
    const form = await readForm(req);
    const user = users()[form.username];
    if (user && user.password === form.password) {
      return provider.interactionFinished(req, res, { login: { accountId: form.username } },
        { mergeWithLastSubmission: false });
    }
    error = '<p role="alert">Wrong username or password.</p>';
  }
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
  res.end(page('Sign in to the test provider', `${error}<form method="post" action="/interaction/${escape(uid)}">
<label>Username <input name="username" autofocus></label>
<label>Password <input name="password" type="password"></label>
<button type="submit">Sign in</button></form>`));
}

const handler = provider.callback();
http.createServer(async (req, res) => {
  const match = /^\/interaction\/([^/?]+)/.exec(req.url);
  if (!match) return handler(req, res);
  try {
    await interaction(req, res, match[1]);
  } catch (error) {
    res.writeHead(400, { 'content-type': 'text/plain' });
    res.end(`interaction failed: ${error.message}`);
  }
}).listen(config.port, '127.0.0.1', () => console.log(`oidc-provider listening on ${config.issuer}`));
