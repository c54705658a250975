//! Where the CLI finds its server and token: named contexts in the user's config file, as kubectl's
//! (`~/.config/drover/config.yaml`, or `DROVER_CONFIG`), written by `drover login` and `drover dev`
//! and chosen with `drover context use`. `--server`/`--token` and `DROVER_SERVER`/`DROVER_TOKEN`
//! override the current context.

use crate::global::GlobalArgs;
use crate::sso::SsoCredential;
use anyhow::{Context as _, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file in the dev data directory that holds the admin token.
pub const TOKEN_FILE: &str = "admin-token";
/// The server a CLI with no context and no --server talks to.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// The config file's contents.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Config {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_context: Option<String>,
    #[serde(default)]
    pub contexts: BTreeMap<String, Context>,
}

/// A server and the token to use there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Context {
    pub server: String,
    pub token: String,
    /// Set when the token came from single sign-on (`drover login --sso`): what renews it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sso: Option<SsoCredential>,
}

/// The config file: `DROVER_CONFIG`, else `$XDG_CONFIG_HOME/drover/config.yaml`, else
/// `~/.config/drover/config.yaml`.
pub fn path() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("DROVER_CONFIG").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|p| !p.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|home| PathBuf::from(home).join(".config"))
            .ok_or_else(|| {
                anyhow!("no home directory (HOME) for the config file; set DROVER_CONFIG")
            })?,
    };
    Ok(base.join("drover").join("config.yaml"))
}

impl Config {
    /// The config file's contents; an absent file is an empty config.
    pub fn load() -> anyhow::Result<Config> {
        Self::load_from(&path()?)
    }

    pub fn load_from(path: &Path) -> anyhow::Result<Config> {
        match std::fs::read_to_string(path) {
            Ok(text) if text.trim().is_empty() => Ok(Config::default()),
            Ok(text) => serde_yaml::from_str(&text)
                .with_context(|| format!("{} is not a Drover config file", path.display())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes the file (mode 0600: it holds tokens), through a temporary file renamed into place.
    pub fn save(&self) -> anyhow::Result<PathBuf> {
        let path = path()?;
        self.save_to(&path)?;
        Ok(path)
    }

    pub fn save_to(&self, path: &Path) -> anyhow::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let text = serde_yaml::to_string(self)?;
        let temp = path.with_extension("yaml.tmp");
        write_private(&temp, text.as_bytes())
            .with_context(|| format!("cannot write {}", temp.display()))?;
        std::fs::rename(&temp, path).with_context(|| format!("cannot write {}", path.display()))
    }

    /// The current context, if one is set and exists.
    pub fn current(&self) -> Option<(&str, &Context)> {
        let name = self.current_context.as_deref()?;
        self.contexts.get(name).map(|context| (name, context))
    }

    /// Adds or replaces context `name` and makes it current.
    pub fn set_current(&mut self, name: &str, context: Context) {
        self.contexts.insert(name.to_owned(), context);
        self.current_context = Some(name.to_owned());
    }
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

/// The server and token a client verb uses: the flags (or `DROVER_SERVER`/`DROVER_TOKEN`), else the
/// current context, else the token `drover dev` keeps in the data directory when the server is local.
/// A context's token is never sent to a server other than the context's own.
pub async fn resolve(global: &GlobalArgs) -> anyhow::Result<(String, String)> {
    let mut config = Config::load()?;
    // A context signed in through the identity provider renews its token when it runs low.
    if global.token.is_none()
        && let Some((name, context)) = config.current()
        && let Some(credential) = &context.sso
        && global.server.as_deref().is_none_or(|server| {
            server.trim_end_matches('/') == context.server.trim_end_matches('/')
        })
        && let Some((token, renewed)) =
            crate::sso::refresh_if_due(&context.server, credential).await?
    {
        let name = name.to_owned();
        let context = Context {
            server: context.server.clone(),
            token,
            sso: Some(renewed),
        };
        config.set_current(&name, context);
        config.save()?;
    }
    let current = config.current();
    let server = match (&global.server, current) {
        (Some(server), _) => server.clone(),
        (None, Some((_, context))) => context.server.clone(),
        (None, None) => DEFAULT_SERVER.to_owned(),
    };
    let server = server.trim_end_matches('/').to_owned();
    if !(server.starts_with("http://") || server.starts_with("https://")) {
        bail!("--server must be an http:// or https:// URL, got `{server}`");
    }
    if let Some(token) = &global.token {
        return Ok((server, token.clone()));
    }
    if let Some((_, context)) = current
        && context.server.trim_end_matches('/') == server
    {
        return Ok((server, context.token.clone()));
    }
    if let Some(token) = dev_token(&server, &global.data_dir) {
        return Ok((server, token));
    }
    bail!(
        "no API token for {server}: run `drover login --server {server}` (or `drover dev`, which logs in to the server it starts), or pass --token / set DROVER_TOKEN"
    )
}

/// The admin token `drover dev` keeps in its data directory, when talking to a local server.
fn dev_token(server: &str, data_dir: &Path) -> Option<String> {
    if !is_loopback(server) {
        return None;
    }
    std::fs::read_to_string(data_dir.join(TOKEN_FILE))
        .ok()
        .map(|token| token.trim().to_owned())
        .filter(|token| !token.is_empty())
}

/// Whether `server`'s host is this machine's loopback: `localhost` or a loopback address, judged on
/// the parsed URL (not its text: `http://localhost.example.com` and `http://127.0.0.1@example.com`
/// are other machines).
fn is_loopback(server: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(server) else {
        return false;
    };
    let host = url.host_str().unwrap_or_default();
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A context name for a server URL: its host and port (`127.0.0.1-8080`, `drover.example.com`).
pub fn name_for(server: &str) -> String {
    let host = server
        .split("://")
        .nth(1)
        .unwrap_or(server)
        .split('/')
        .next()
        .unwrap_or_default();
    host.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_round_trips_privately() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("nested").join("config.yaml");
        assert_eq!(Config::load_from(&path)?, Config::default());
        let mut config = Config::default();
        config.set_current(
            "dev",
            Context {
                server: "http://127.0.0.1:8080".to_owned(),
                token: "drv_secret".to_owned(),
                sso: None,
            },
        );
        config.save_to(&path)?;
        assert_eq!(Config::load_from(&path)?, config);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        std::fs::write(&path, "current-context: dev\nbogus: 1\n")?;
        let err = Config::load_from(&path)
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(err.contains("is not a Drover config file"), "{err}");
        Ok(())
    }

    #[test]
    fn the_dev_token_goes_only_to_this_machine() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join(TOKEN_FILE), "drv_admin\n")?;
        for local in [
            "http://127.0.0.1:8080",
            "http://localhost:8080",
            "http://LOCALHOST",
            "http://127.0.0.2:80",
            "http://[::1]:8080",
        ] {
            assert_eq!(
                dev_token(local, dir.path()).as_deref(),
                Some("drv_admin"),
                "{local}"
            );
        }
        for other in [
            "http://localhost.example.com",
            "http://127.0.0.1.nip.io:8080",
            "http://127.0.0.1@example.com",
            "http://localhost:8080@example.com",
            "http://example.com/://127.0.0.1",
            "http://10.0.0.1:8080",
        ] {
            assert_eq!(dev_token(other, dir.path()), None, "{other}");
        }
        Ok(())
    }

    #[test]
    fn context_names_come_from_the_host() {
        assert_eq!(name_for("http://127.0.0.1:8080"), "127.0.0.1-8080");
        assert_eq!(
            name_for("https://drover.example.com/"),
            "drover.example.com"
        );
    }
}
