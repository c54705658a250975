//! Tenant secrets at rest: each value is sealed with the server's key (ChaCha20-Poly1305, a fresh
//! random nonce per write) with the tenant and the secret's name as associated data, so a sealed value
//! copied to another tenant or name does not open. The key never reaches the database; a digest of it
//! (`key_id`) is stored beside each value so a server started with another key says so plainly.
//!
//! Values are opened in one place only: when the scheduling loop hands a task its environment.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use drover_core::TenantId;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;

/// Bytes of a server key.
pub const KEY_LEN: usize = 32;
/// The longest secret value accepted, in characters (as JSON Schema's `maxLength` counts them; up to
/// 256 KiB of UTF-8).
pub const MAX_VALUE_CHARS: usize = 64 * 1024;

/// A value sealed for one tenant and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub key_id: String,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("the server key must be {KEY_LEN} bytes, base64-encoded ({0})")]
    BadKey(String),
    #[error("sealed with another server key (`{0}`); start the server with the key that sealed it")]
    OtherKey(String),
    #[error("the sealed value does not open (damaged, or moved to another tenant or name)")]
    Damaged,
    #[error("cannot read or write the key file {path}: {source}")]
    KeyFile {
        path: String,
        source: std::io::Error,
    },
}

/// The server's secret key.
pub struct SecretBox {
    key: LessSafeKey,
    key_id: String,
    random: SystemRandom,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretBox")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl SecretBox {
    pub fn new(key: &[u8; KEY_LEN]) -> Self {
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, key)
            .unwrap_or_else(|_| unreachable!("a 32-byte key is always a ChaCha20-Poly1305 key"));
        let digest = Sha256::digest([b"drover-secret-key:".as_slice(), key].concat());
        Self {
            key: LessSafeKey::new(unbound),
            key_id: hex::encode(&digest[..8]),
            random: SystemRandom::new(),
        }
    }

    /// A key given as base64 text (`DROVER_SECRET_KEY`).
    pub fn from_base64(text: &str) -> Result<Self, SecretError> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|err| SecretError::BadKey(err.to_string()))?;
        let key: [u8; KEY_LEN] = bytes
            .try_into()
            .map_err(|bytes: Vec<u8>| SecretError::BadKey(format!("got {} bytes", bytes.len())))?;
        Ok(Self::new(&key))
    }

    /// The key in `path` (base64), created with a random key (mode 0600) when the file is missing.
    pub fn load_or_create(path: &Path) -> Result<Self, SecretError> {
        let key_file = |source| SecretError::KeyFile {
            path: path.display().to_string(),
            source,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => return Self::from_base64(&text),
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(key_file(err)),
            Err(_) => {}
        }
        let mut key = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut key)
            .map_err(|_| key_file(std::io::Error::other("no randomness")))?;
        // Written whole under a private name, then linked into place: two replicas starting at once
        // on one shared file end up with the same key, never a half-written one.
        let mut suffix = [0u8; 8];
        SystemRandom::new()
            .fill(&mut suffix)
            .map_err(|_| key_file(std::io::Error::other("no randomness")))?;
        let temporary = path.with_extension(format!("tmp-{}", hex::encode(suffix)));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&temporary).map_err(key_file)?;
        file.write_all(format!("{}\n", STANDARD.encode(key)).as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(key_file)?;
        let linked = std::fs::hard_link(&temporary, path);
        let _ = std::fs::remove_file(&temporary);
        match linked {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(key_file(err)),
        }
        // Whoever linked first wins: everyone uses the key that is in place.
        let text = std::fs::read_to_string(path).map_err(key_file)?;
        Self::from_base64(&text)
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    fn aad(tenant: TenantId, name: &str) -> Vec<u8> {
        [tenant.0.as_bytes().as_slice(), b"/", name.as_bytes()].concat()
    }

    pub fn seal(&self, tenant: TenantId, name: &str, value: &[u8]) -> Sealed {
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .unwrap_or_else(|_| unreachable!("the system random generator does not fail"));
        let mut ciphertext = value.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(Self::aad(tenant, name)),
                &mut ciphertext,
            )
            .unwrap_or_else(|_| unreachable!("sealing fails only past 256 GiB"));
        Sealed {
            key_id: self.key_id.clone(),
            nonce: nonce.to_vec(),
            ciphertext,
        }
    }

    pub fn open(
        &self,
        tenant: TenantId,
        name: &str,
        sealed: &Sealed,
    ) -> Result<Vec<u8>, SecretError> {
        if sealed.key_id != self.key_id {
            return Err(SecretError::OtherKey(sealed.key_id.clone()));
        }
        let nonce: [u8; NONCE_LEN] = sealed
            .nonce
            .as_slice()
            .try_into()
            .map_err(|_| SecretError::Damaged)?;
        let mut buffer = sealed.ciphertext.clone();
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(Self::aad(tenant, name)),
                &mut buffer,
            )
            .map_err(|_| SecretError::Damaged)?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_for_its_tenant_name_and_key() {
        let secrets = SecretBox::new(&[7; KEY_LEN]);
        let vision = TenantId(uuid::Uuid::now_v7());
        let nlp = TenantId(uuid::Uuid::now_v7());
        let sealed = secrets.seal(vision, "hf-token", b"hunter2");
        assert!(!sealed.ciphertext.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(
            secrets.open(vision, "hf-token", &sealed).unwrap(),
            b"hunter2"
        );
        // Two seals of one value differ (fresh nonces).
        assert_ne!(
            secrets.seal(vision, "hf-token", b"hunter2").ciphertext,
            sealed.ciphertext
        );
        assert!(matches!(
            secrets.open(nlp, "hf-token", &sealed),
            Err(SecretError::Damaged)
        ));
        assert!(matches!(
            secrets.open(vision, "other", &sealed),
            Err(SecretError::Damaged)
        ));
        let mut tampered = sealed.clone();
        tampered.ciphertext[0] ^= 1;
        assert!(matches!(
            secrets.open(vision, "hf-token", &tampered),
            Err(SecretError::Damaged)
        ));
        let rotated = SecretBox::new(&[8; KEY_LEN]);
        assert!(matches!(
            rotated.open(vision, "hf-token", &sealed),
            Err(SecretError::OtherKey(_))
        ));
    }

    #[test]
    fn a_key_file_is_made_once_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret-key");
        let made = SecretBox::load_or_create(&path).unwrap();
        let read = SecretBox::load_or_create(&path).unwrap();
        assert_eq!(made.key_id(), read.key_id());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(matches!(
            SecretBox::from_base64("c2hvcnQ="),
            Err(SecretError::BadKey(_))
        ));
    }
}
