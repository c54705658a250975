//! Bearer secrets and how they are kept: API tokens (`drv_`), executor enrolment tokens (`dre_`) and
//! node credentials (`drn_`) are the prefix followed by 43 URL-safe base64 characters (32 random
//! bytes). Only their SHA-256 is stored: they are long random strings, not passwords, so a slow hash
//! would buy nothing.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// API tokens, which users authenticate with.
pub const TOKEN_PREFIX: &str = "drv_";
/// Enrolment tokens, which executors exchange for a node credential.
pub const ENROLLMENT_PREFIX: &str = "dre_";
/// Node credentials, which executors authenticate their sessions with.
pub const NODE_CREDENTIAL_PREFIX: &str = "drn_";

/// A new random API token.
pub fn generate_token() -> String {
    generate_secret(TOKEN_PREFIX)
}

/// A new random secret: `prefix` and 32 random bytes in URL-safe base64.
pub fn generate_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// What the store keeps of a token: its SHA-256.
pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// What listings show of a token: enough to tell tokens apart, never enough to use one.
pub fn display_prefix(token: &str) -> String {
    token.chars().take(TOKEN_PREFIX.len() + 6).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_hashed_stably() {
        let a = generate_token();
        let b = generate_token();
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 43);
        assert_eq!(hash_token(&a), hash_token(&a));
        assert_ne!(hash_token(&a), hash_token(&b));
        assert_eq!(display_prefix(&a).len(), 10);
    }
}
