-- The token a token was minted with (POST /api/v1/tokens, a dashboard sign-in): revoking a token
-- revokes every token minted from it, and theirs.
ALTER TABLE api_tokens ADD COLUMN parent_id blob REFERENCES api_tokens (id);
CREATE INDEX api_tokens_parent ON api_tokens (parent_id);
