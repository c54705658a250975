//! `drover secret set|delete NAME` and `drover secrets`: the tenant's secrets. A value is read from
//! standard input or a file, never from the command line (which shells keep in their history and
//! `ps` shows to every user of the machine).

use crate::client::{Client, segment};
use crate::global::GlobalArgs;
use crate::output::{self, Format, out};
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::io::Read;
use std::path::PathBuf;

#[derive(Debug, clap::Subcommand)]
pub enum SecretCommand {
    /// Create or replace a secret; the value is read from standard input (one trailing newline is
    /// dropped) or from --from-file. Jobs use it as `env: {VAR: {secret: NAME}}`.
    Set {
        name: String,
        /// Read the value from this file, byte for byte.
        #[arg(long)]
        from_file: Option<PathBuf>,
    },
    /// Delete a secret.
    Delete { name: String },
}

fn print(global: &GlobalArgs, secrets: &[Value]) {
    let rows: Vec<Vec<String>> = secrets
        .iter()
        .map(|s| {
            vec![
                output::text(&s["name"]),
                output::text(&s["created_at"]),
                output::text(&s["updated_at"]),
            ]
        })
        .collect();
    match global.output {
        Format::Json => output::json(&json!({ "secrets": secrets })),
        Format::Table => output::table(&["NAME", "CREATED", "UPDATED"], &rows),
    }
}

pub async fn secrets(global: &GlobalArgs) -> anyhow::Result<()> {
    let response = Client::new(global).await?.get("/api/v1/secrets").await?;
    print(
        global,
        response["secrets"].as_array().map_or(&[], Vec::as_slice),
    );
    Ok(())
}

pub async fn secret(global: &GlobalArgs, command: SecretCommand) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    match command {
        SecretCommand::Set { name, from_file } => {
            let value = match from_file {
                Some(path) => std::fs::read_to_string(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?,
                None => {
                    let mut text = String::new();
                    std::io::stdin()
                        .read_to_string(&mut text)
                        .context("cannot read the value from standard input")?;
                    if text.ends_with('\n') {
                        text.pop();
                        if text.ends_with('\r') {
                            text.pop();
                        }
                    }
                    text
                }
            };
            if value.is_empty() {
                bail!("the secret's value is empty (pipe it in, or give --from-file)");
            }
            let response = client
                .put_json(
                    &format!("/api/v1/secrets/{}", segment(&name)),
                    &json!({ "value": value }),
                )
                .await?;
            match global.output {
                Format::Json => output::json(&response),
                Format::Table => out!("secret {name} set"),
            }
        }
        SecretCommand::Delete { name } => {
            let response = client
                .delete(&format!("/api/v1/secrets/{}", segment(&name)))
                .await?;
            print(global, std::slice::from_ref(&response["secret"]));
        }
    }
    Ok(())
}
