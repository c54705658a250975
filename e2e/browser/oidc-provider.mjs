// A real OpenID Connect provider for the single sign-on tests (e2e/tests/executors/sso.rs): the npm
// package oidc-provider (OpenID Certified), with its development login pages. Two clients: Drover's
// dashboard (confidential; authorization code with PKCE) and Drover's CLI (public; the device flow).
// Accounts and their groups come from the JSON file OIDC_ACCOUNTS, read again at every sign-in and
// refresh, so a test takes a group away by rewriting it. Beside the provider, /test/* routes that
// only a test has: sign arbitrary claims with the provider's key or with a key it does not publish,
// and rotate its keys. Prints "oidc-provider listening on <issuer>" when ready.
import Provider from "oidc-provider";
import * as jose from "jose";
import http from "node:http";
import { readFileSync } from "node:fs";

const PORT = Number(process.env.OIDC_PORT || 0);
const ACCOUNTS = process.env.OIDC_ACCOUNTS;
const REDIRECT = process.env.OIDC_REDIRECT_URI;
const DASHBOARD_SECRET = process.env.OIDC_DASHBOARD_SECRET || "dashboard-secret";

async function signingKey(kid) {
  const { privateKey } = await jose.generateKeyPair("RS256", { extractable: true });
  const jwk = await jose.exportJWK(privateKey);
  return { ...jwk, kid, alg: "RS256", use: "sig" };
}

const accounts = () => JSON.parse(readFileSync(ACCOUNTS, "utf8"));

function configuration(keys) {
  return {
    clients: [
      {
        client_id: "drover-dashboard",
        client_secret: DASHBOARD_SECRET,
        redirect_uris: [REDIRECT],
        grant_types: ["authorization_code", "refresh_token"],
        response_types: ["code"],
      },
      {
        client_id: "drover-cli",
        token_endpoint_auth_method: "none",
        grant_types: ["urn:ietf:params:oauth:grant-type:device_code", "refresh_token"],
        response_types: [],
        redirect_uris: [],
      },
    ],
    jwks: { keys },
    cookies: { keys: ["drover-e2e-cookie-key"] },
    claims: {
      openid: ["sub"],
      profile: ["preferred_username", "name", "groups"],
      email: ["email"],
    },
    // Profile claims (the groups) in the ID token itself, as Drover reads them there.
    conformIdTokenClaims: false,
    features: {
      devInteractions: { enabled: true },
      deviceFlow: { enabled: true },
      revocation: { enabled: true },
    },
    // A refresh token to every client allowed the grant, without the consent prompt
    // offline_access would otherwise need.
    issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed("refresh_token"),
    ttl: { IdToken: 3600, AccessToken: 3600, RefreshToken: 86400, DeviceCode: 600 },
    async findAccount(_ctx, id) {
      const account = accounts()[id];
      // An account taken away: refreshes for it fail.
      if (!account) return undefined;
      return {
        accountId: id,
        async claims() {
          return {
            sub: id,
            preferred_username: id,
            name: id,
            email: `${id}@example.test`,
            groups: account.groups || [],
          };
        },
      };
    },
  };
}

let keys = [await signingKey("key-1")];
let provider;
const outsider = await signingKey("key-1"); // same kid, not the provider's key: a forged signature

function build(issuer) {
  provider = new Provider(issuer, configuration(keys));
  provider.on("server_error", (_ctx, err) => console.error("oidc-provider error:", err));
  return provider;
}

async function body(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}");
}

// Test-only routes: POST /test/sign {claims, key: "provider"|"outsider"|"<kid>"} -> {token};
// POST /test/rotate -> a new key first in the key set (the old one still published).
async function testRoute(req, res, issuer) {
  const ask = await body(req);
  if (req.url === "/test/sign") {
    // "outsider": a key the provider does not publish; a kid: that key; else the first key.
    const jwk = ask.key === "outsider" ? outsider : keys.find((k) => k.kid === ask.key) || keys[keys.length - 1];
    const key = await jose.importJWK(jwk, "RS256");
    const now = Math.floor(Date.now() / 1000);
    const claims = { iss: issuer, iat: now, exp: now + 600, ...ask.claims };
    const token = await new jose.SignJWT(claims)
      .setProtectedHeader({ alg: "RS256", kid: jwk.kid, typ: "JWT" })
      .sign(key);
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ token }));
  } else if (req.url === "/test/rotate") {
    keys = [await signingKey(`key-${keys.length + 1}`), ...keys];
    build(issuer);
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ kid: keys[0].kid }));
  } else {
    res.writeHead(404);
    res.end();
  }
}

const server = http.createServer();
server.listen(PORT, "127.0.0.1", () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  build(issuer);
  server.on("request", (req, res) => {
    if (req.url.startsWith("/test/") && req.method === "POST") {
      testRoute(req, res, issuer).catch((err) => {
        res.writeHead(500);
        res.end(String(err));
      });
    } else {
      provider.callback()(req, res);
    }
  });
  console.log(`oidc-provider listening on ${issuer}`);
});
