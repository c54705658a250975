//! `drover login` and `drover context`: named servers with their tokens in the user's config file;
//! `drover login --sso` signs in through the server's identity provider (`sso.rs`).

use crate::client::Client;
use crate::config::{self, Config, Context};
use crate::global::GlobalArgs;
use crate::output::{self, Format, out};
use anyhow::{Context as _, bail};
use serde_json::json;

#[derive(Debug, clap::Args)]
pub struct LoginArgs {
    /// The context's name (default: the server's host and port).
    #[arg(long)]
    name: Option<String>,
    /// Sign in through the server's identity provider (single sign-on): open the URL it prints in
    /// any browser and enter the code. The token renews itself until the provider ends the session.
    #[arg(long)]
    sso: bool,
}

/// `drover login --sso`: the device flow at the server's provider, then the context.
async fn login_sso(server: &str, name: Option<String>) -> anyhow::Result<()> {
    let name = name.unwrap_or_else(|| config::name_for(server));
    if name.is_empty() {
        bail!("--name must not be empty");
    }
    let signed_in = crate::sso::sign_in(server).await?;
    let mut config = Config::load()?;
    config.set_current(
        &name,
        Context {
            server: server.to_owned(),
            token: signed_in.exchanged.token,
            sso: Some(signed_in.credential),
        },
    );
    let path = config.save()?;
    out!(
        "Logged in to {server} as {} (tenant {}) through single sign-on; context `{name}` is current ({})",
        signed_in.exchanged.user,
        signed_in.exchanged.tenant,
        path.display()
    );
    Ok(())
}

#[derive(Debug, clap::Subcommand)]
pub enum ContextCommand {
    /// List the contexts; `*` marks the current one.
    List,
    /// Make a context current.
    Use { name: String },
    /// Forget a context (and its token).
    Delete { name: String },
}

/// `drover login --server URL [--token T]`: checks the token against the server and saves the pair as
/// the current context. Without --token (or DROVER_TOKEN), the token is read from standard input.
pub async fn login(global: &GlobalArgs, args: LoginArgs) -> anyhow::Result<()> {
    let Some(server) = global.server.clone() else {
        bail!("drover login needs --server URL (or DROVER_SERVER)");
    };
    let server = server.trim_end_matches('/').to_owned();
    if args.sso {
        if global.token.is_some() {
            bail!(
                "--sso signs in through the identity provider; it takes no --token (or DROVER_TOKEN)"
            );
        }
        return login_sso(&server, args.name).await;
    }
    let token = match &global.token {
        Some(token) => token.clone(),
        None => {
            if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                eprint!("API token for {server}: ");
            }
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .context("cannot read the token from standard input")?;
            line.trim().to_owned()
        }
    };
    if token.is_empty() {
        bail!("no token given: pass --token, set DROVER_TOKEN or type it on standard input");
    }
    let me = Client::with(&server, &token)?.get("/api/v1/me").await?;
    let name = args.name.unwrap_or_else(|| config::name_for(&server));
    if name.is_empty() {
        bail!("--name must not be empty");
    }
    let mut config = Config::load()?;
    config.set_current(
        &name,
        Context {
            server: server.clone(),
            token,
            sso: None,
        },
    );
    let path = config.save()?;
    let user = &me["user"];
    out!(
        "Logged in to {server} as {} (tenant {}); context `{name}` is current ({})",
        output::text(&user["name"]),
        output::text(&user["tenant"]),
        path.display()
    );
    Ok(())
}

pub fn context(global: &GlobalArgs, command: ContextCommand) -> anyhow::Result<()> {
    let mut config = Config::load()?;
    match command {
        ContextCommand::List => {
            let current = config.current_context.clone().unwrap_or_default();
            match global.output {
                Format::Json => output::json(&json!({
                    "current_context": config.current_context,
                    "contexts": config.contexts.iter().map(|(name, c)| json!({"name": name, "server": c.server})).collect::<Vec<_>>(),
                })),
                Format::Table => {
                    let rows: Vec<Vec<String>> = config
                        .contexts
                        .iter()
                        .map(|(name, c)| {
                            let mark = if *name == current { "*" } else { "" };
                            vec![mark.to_owned(), name.clone(), c.server.clone()]
                        })
                        .collect();
                    if rows.is_empty() {
                        out!(
                            "no contexts yet: `drover login --server URL` or `drover dev` makes one"
                        );
                    } else {
                        output::table(&["CURRENT", "NAME", "SERVER"], &rows);
                    }
                }
            }
        }
        ContextCommand::Use { name } => {
            if !config.contexts.contains_key(&name) {
                bail!("no context `{name}`; the contexts are: {}", known(&config));
            }
            config.current_context = Some(name.clone());
            config.save()?;
            out!("context `{name}` is current");
        }
        ContextCommand::Delete { name } => {
            if config.contexts.remove(&name).is_none() {
                bail!("no context `{name}`; the contexts are: {}", known(&config));
            }
            if config.current_context.as_deref() == Some(name.as_str()) {
                config.current_context = None;
            }
            config.save()?;
            out!("context `{name}` deleted");
        }
    }
    Ok(())
}

fn known(config: &Config) -> String {
    if config.contexts.is_empty() {
        return "(none)".to_owned();
    }
    config
        .contexts
        .keys()
        .cloned()
        .collect::<Vec<_>>()
        .join(", ")
}
