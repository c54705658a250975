-- Single sign-on with the company's OpenID Connect provider (issue #56).
--
-- A sign-in in progress: the browser was sent to the provider with `state`, `nonce` and a PKCE
-- challenge; the callback spends the row (deleted as it is read), so a replayed `state` finds nothing.
-- Only the state's SHA-256 is kept, as for every bearer secret.
CREATE TABLE sso_logins (
    state_hash    bytea PRIMARY KEY,
    nonce         text NOT NULL,
    pkce_verifier text NOT NULL,
    next          text NOT NULL,        -- the dashboard path to land on afterwards
    expires_at    timestamptz NOT NULL
);

-- Who a provider's subject is in Drover: one user per tenant their groups map to.
CREATE TABLE sso_identities (
    issuer    text NOT NULL,
    subject   text NOT NULL,
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    user_id   uuid NOT NULL UNIQUE REFERENCES users (id),
    linked_at timestamptz NOT NULL,
    PRIMARY KEY (issuer, subject, tenant_id)
);

-- A dashboard session opened through the provider: its Drover token, and the provider's refresh
-- token (sealed with the server key) that keeps it alive. Each replica's sweep refreshes the sessions
-- that are due, re-reads the groups, and ends the session when the provider refuses.
CREATE TABLE sso_sessions (
    token_id    uuid PRIMARY KEY REFERENCES api_tokens (id),
    user_id     uuid NOT NULL REFERENCES users (id),
    issuer      text NOT NULL,
    subject     text NOT NULL,
    key_id      text,                   -- which server key sealed the refresh token; NULL: none
    nonce       bytea,
    ciphertext  bytea,
    refresh_due timestamptz NOT NULL
);
CREATE INDEX sso_sessions_due ON sso_sessions (refresh_due);
