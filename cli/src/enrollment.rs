//! `drover enrollment-token create|list|revoke` and `drover node revoke`: how executors come to be
//! trusted (cluster administrators); `drover gateway-ca`: how executors trust the gateway.

use crate::client::{Client, segment};
use crate::global::GlobalArgs;
use crate::output::{self, Format, out};
use serde_json::{Value, json};

#[derive(Debug, clap::Subcommand)]
pub enum EnrollmentCommand {
    /// Mint an enrolment token; its secret is printed once. An executor started with
    /// `--enrollment-token SECRET` exchanges it for its node's credential.
    Create {
        name: String,
        /// How many executors may enrol with it.
        #[arg(long, default_value_t = 1)]
        uses: u32,
        /// Lifetime, e.g. `1h` or `7d`.
        #[arg(long, default_value = "24h")]
        expires_in: String,
        /// Mint it for this node only (needed to enrol a node again after `drover node revoke`).
        #[arg(long)]
        node: Option<String>,
    },
    /// List enrolment tokens (never their secrets).
    List,
    /// Revoke an enrolment token: no executor enrols with it any more.
    Revoke { id: String },
}

fn print(global: &GlobalArgs, tokens: &[Value]) {
    let rows: Vec<Vec<String>> = tokens
        .iter()
        .map(|t| {
            let status = if !t["revoked_at"].is_null() {
                "revoked"
            } else if t["uses_left"] == 0 {
                "used"
            } else {
                "active"
            };
            vec![
                output::text(&t["id"]),
                output::text(&t["name"]),
                format!("{}…", output::text(&t["prefix"])),
                output::text(&t["uses_left"]),
                output::text(&t["expires_at"]),
                status.to_owned(),
            ]
        })
        .collect();
    match global.output {
        Format::Json => output::json(&json!({ "enrollment_tokens": tokens })),
        Format::Table => output::table(
            &["ID", "NAME", "PREFIX", "USES LEFT", "EXPIRES", "STATUS"],
            &rows,
        ),
    }
}

pub async fn enrollment_token(
    global: &GlobalArgs,
    command: EnrollmentCommand,
) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    match command {
        EnrollmentCommand::Create {
            name,
            uses,
            expires_in,
            node,
        } => {
            let body = json!({"name": name, "uses": uses, "expires_in": expires_in, "node": node});
            let response = client.post_json("/api/v1/enrollment-tokens", &body).await?;
            match global.output {
                Format::Json => output::json(&response),
                Format::Table => {
                    let token = &response["enrollment_token"];
                    out!(
                        "enrolment token {} created ({} use(s), expires {}); its secret is shown this once:",
                        output::text(&token["id"]),
                        output::text(&token["uses_left"]),
                        output::text(&token["expires_at"])
                    );
                    out!("{}", output::text(&response["secret"]));
                }
            }
        }
        EnrollmentCommand::List => {
            let response = client.get("/api/v1/enrollment-tokens").await?;
            print(
                global,
                response["enrollment_tokens"]
                    .as_array()
                    .map_or(&[], Vec::as_slice),
            );
        }
        EnrollmentCommand::Revoke { id } => {
            let response = client
                .delete(&format!("/api/v1/enrollment-tokens/{}", segment(&id)))
                .await?;
            print(global, std::slice::from_ref(&response["enrollment_token"]));
        }
    }
    Ok(())
}

/// `drover node revoke NAME`.
pub async fn revoke_node(global: &GlobalArgs, name: &str) -> anyhow::Result<()> {
    let response = Client::new(global)
        .await?
        .post_json(
            &format!("/api/v1/nodes/{}/revoke", segment(name)),
            &json!({}),
        )
        .await?;
    match global.output {
        Format::Json => output::json(&response),
        Format::Table => out!(
            "{name}: {} credential(s) revoked{}; its executor must enrol again with a new enrolment token",
            output::text(&response["revoked_credentials"]),
            if response["disconnected"] == true {
                ", session ended"
            } else {
                ""
            }
        ),
    }
    Ok(())
}

/// Prints the gateway's certificate authority: the PEM on stdout (the whole JSON with `-o json`),
/// the pin on stderr.
pub async fn gateway_ca(global: &GlobalArgs) -> anyhow::Result<()> {
    let authority = Client::new(global)
        .await?
        .get("/api/v1/gateway-authority")
        .await?;
    match global.output {
        Format::Json => output::json(&authority),
        Format::Table => {
            print!("{}", output::text(&authority["certificate"]));
            eprintln!("pin: {}", output::text(&authority["pin"]));
        }
    }
    Ok(())
}
