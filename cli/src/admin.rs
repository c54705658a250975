//! Client verbs for administration: tenants and quotas, users, tokens, nodes, and `whoami`.

use crate::client::{Client, segment};
use crate::global::GlobalArgs;
use crate::output::{self, Format, out};
use serde_json::{Value, json};

#[derive(Debug, clap::Subcommand)]
pub enum TenantCommand {
    /// Create a tenant.
    Create {
        name: String,
        #[arg(long, default_value_t = 0)]
        guaranteed_gpus: u32,
        #[arg(long)]
        max_gpus: Option<u32>,
        /// A quota of one GPU model, repeatable:
        /// `MODEL:guaranteed=N,max=N,lending-limit=N` (each key optional).
        #[arg(long = "flavour", value_name = "MODEL:KEY=N,...", value_parser = parse_flavour)]
        flavours: Vec<Value>,
    },
    /// Set a tenant's quota (the whole of it: GPU models not given lose theirs).
    Quota {
        name: String,
        #[arg(long)]
        guaranteed_gpus: u32,
        #[arg(long)]
        max_gpus: Option<u32>,
        /// A quota of one GPU model, repeatable:
        /// `MODEL:guaranteed=N,max=N,lending-limit=N` (each key optional).
        #[arg(long = "flavour", value_name = "MODEL:KEY=N,...", value_parser = parse_flavour)]
        flavours: Vec<Value>,
    },
}

/// `MODEL:guaranteed=N,max=N,lending-limit=N` as the API's flavour.
fn parse_flavour(text: &str) -> Result<Value, String> {
    let (model, rest) = text.split_once(':').unwrap_or((text, ""));
    let model = model.trim();
    if model.is_empty() {
        return Err(
            "expected MODEL:guaranteed=N,max=N,lending-limit=N, e.g. v100:guaranteed=4,max=8"
                .to_owned(),
        );
    }
    let mut flavour = json!({ "gpu_model": model });
    for pair in rest.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("`{pair}`: expected KEY=N"))?;
        let number: u32 = value
            .trim()
            .parse()
            .map_err(|_| format!("`{pair}`: {value:?} is not a whole number of GPUs"))?;
        let field = match key.trim() {
            "guaranteed" => "guaranteed_gpus",
            "max" => "max_gpus",
            "lending-limit" | "lending_limit" => "lending_limit",
            other => {
                return Err(format!(
                    "unknown key `{other}`: expected guaranteed, max or lending-limit"
                ));
            }
        };
        flavour[field] = json!(number);
    }
    Ok(flavour)
}

/// A tenant's quotas per GPU model in a cell: `v100 4/8 lends 2, k80 0/-`.
fn flavours_cell(quota: &Value) -> String {
    let Some(flavours) = quota["flavours"].as_array().filter(|f| !f.is_empty()) else {
        return "-".to_owned();
    };
    flavours
        .iter()
        .map(|f| {
            let mut cell = format!(
                "{} {}/{}",
                output::text(&f["gpu_model"]),
                f["guaranteed_gpus"].as_u64().unwrap_or(0),
                f["max_gpus"]
                    .as_u64()
                    .map_or_else(|| "-".to_owned(), |m| m.to_string())
            );
            if let Some(lends) = f["lending_limit"].as_u64() {
                cell.push_str(&format!(" lends {lends}"));
            }
            cell
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Debug, clap::Subcommand)]
pub enum UserCommand {
    /// Create a user.
    Create {
        name: String,
        /// admin, member or viewer.
        #[arg(long, default_value = "member")]
        role: String,
        /// The tenant (yours when absent).
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        cluster_admin: bool,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Create a token; its secret is printed once.
    Create {
        name: String,
        /// For another user (tenant admins, cluster administrators).
        #[arg(long)]
        user: Option<String>,
        /// Lifetime, e.g. `30d`.
        #[arg(long)]
        expires_in: Option<String>,
    },
    /// Revoke a token.
    Revoke { id: String },
}

fn print_tenants(global: &GlobalArgs, tenants: &[Value]) {
    let rows: Vec<Vec<String>> = tenants
        .iter()
        .map(|t| {
            vec![
                output::text(&t["name"]),
                output::text(&t["quota"]["guaranteed_gpus"]),
                t["quota"]["max_gpus"]
                    .as_u64()
                    .map_or_else(|| "unlimited".to_owned(), |m| m.to_string()),
                flavours_cell(&t["quota"]),
                output::age(&t["created_at"]),
            ]
        })
        .collect();
    match global.output {
        Format::Json => output::json(&json!({ "tenants": tenants })),
        Format::Table => output::table(
            &[
                "NAME",
                "GUARANTEED GPUS",
                "MAX GPUS",
                "PER MODEL (GUARANTEED/MAX)",
                "AGE",
            ],
            &rows,
        ),
    }
}

pub async fn tenants(global: &GlobalArgs) -> anyhow::Result<()> {
    let response = Client::new(global).await?.get("/api/v1/tenants").await?;
    print_tenants(
        global,
        response["tenants"].as_array().map_or(&[], Vec::as_slice),
    );
    Ok(())
}

pub async fn tenant(global: &GlobalArgs, command: TenantCommand) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    let response = match command {
        TenantCommand::Create {
            name,
            guaranteed_gpus,
            max_gpus,
            flavours,
        } => {
            let body = json!({"name": name, "quota": {"guaranteed_gpus": guaranteed_gpus, "max_gpus": max_gpus, "flavours": flavours}});
            client.post_json("/api/v1/tenants", &body).await?
        }
        TenantCommand::Quota {
            name,
            guaranteed_gpus,
            max_gpus,
            flavours,
        } => {
            let body = json!({"guaranteed_gpus": guaranteed_gpus, "max_gpus": max_gpus, "flavours": flavours});
            client
                .put_json(&format!("/api/v1/tenants/{}/quota", segment(&name)), &body)
                .await?
        }
    };
    print_tenants(global, std::slice::from_ref(&response["tenant"]));
    Ok(())
}

fn print_users(global: &GlobalArgs, users: &[Value]) {
    let rows: Vec<Vec<String>> = users
        .iter()
        .map(|u| {
            vec![
                output::text(&u["id"]),
                output::text(&u["name"]),
                output::text(&u["tenant"]),
                output::text(&u["role"]),
                if u["cluster_admin"].as_bool() == Some(true) {
                    "yes"
                } else {
                    "no"
                }
                .to_owned(),
            ]
        })
        .collect();
    match global.output {
        Format::Json => output::json(&json!({ "users": users })),
        Format::Table => output::table(&["ID", "NAME", "TENANT", "ROLE", "CLUSTER ADMIN"], &rows),
    }
}

pub async fn users(global: &GlobalArgs) -> anyhow::Result<()> {
    let response = Client::new(global).await?.get("/api/v1/users").await?;
    print_users(
        global,
        response["users"].as_array().map_or(&[], Vec::as_slice),
    );
    Ok(())
}

pub async fn user(global: &GlobalArgs, command: UserCommand) -> anyhow::Result<()> {
    let UserCommand::Create {
        name,
        role,
        tenant,
        cluster_admin,
    } = command;
    let body =
        json!({"name": name, "role": role, "tenant": tenant, "cluster_admin": cluster_admin});
    let response = Client::new(global)
        .await?
        .post_json("/api/v1/users", &body)
        .await?;
    print_users(global, std::slice::from_ref(&response["user"]));
    Ok(())
}

fn print_tokens(global: &GlobalArgs, tokens: &[Value]) {
    let rows: Vec<Vec<String>> = tokens
        .iter()
        .map(|t| {
            let status = if !t["revoked_at"].is_null() {
                "revoked"
            } else {
                "active"
            };
            vec![
                output::text(&t["id"]),
                output::text(&t["name"]),
                format!("{}…", output::text(&t["prefix"])),
                output::text(&t["expires_at"]),
                status.to_owned(),
            ]
        })
        .collect();
    match global.output {
        Format::Json => output::json(&json!({ "tokens": tokens })),
        Format::Table => output::table(&["ID", "NAME", "PREFIX", "EXPIRES", "STATUS"], &rows),
    }
}

pub async fn tokens(global: &GlobalArgs) -> anyhow::Result<()> {
    let response = Client::new(global).await?.get("/api/v1/tokens").await?;
    print_tokens(
        global,
        response["tokens"].as_array().map_or(&[], Vec::as_slice),
    );
    Ok(())
}

pub async fn token(global: &GlobalArgs, command: TokenCommand) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    match command {
        TokenCommand::Create {
            name,
            user,
            expires_in,
        } => {
            let body = json!({"name": name, "user_id": user, "expires_in": expires_in});
            let response = client.post_json("/api/v1/tokens", &body).await?;
            match global.output {
                Format::Json => output::json(&response),
                Format::Table => {
                    out!(
                        "token {} created; its secret is shown this once:",
                        output::text(&response["token"]["id"])
                    );
                    out!("{}", output::text(&response["secret"]));
                }
            }
        }
        TokenCommand::Revoke { id } => {
            let response = client
                .delete(&format!("/api/v1/tokens/{}", segment(&id)))
                .await?;
            print_tokens(global, std::slice::from_ref(&response["token"]));
        }
    }
    Ok(())
}

/// A node's GPUs as `2×V100` (`2×V100, 1×K80` when they differ; `0` without any).
fn gpus_in_words(gpus: &Value) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for gpu in gpus.as_array().map_or(&[][..], Vec::as_slice) {
        let model = gpu["model"].as_str().unwrap_or("?").to_owned();
        match counts.iter_mut().find(|(m, _)| *m == model) {
            Some((_, n)) => *n += 1,
            None => counts.push((model, 1)),
        }
    }
    if counts.is_empty() {
        return "0".to_owned();
    }
    counts
        .iter()
        .map(|(model, n)| format!("{n}×{model}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub async fn nodes(global: &GlobalArgs) -> anyhow::Result<()> {
    let response = Client::new(global).await?.get("/api/v1/nodes").await?;
    let nodes = response["nodes"].as_array().map_or(&[][..], Vec::as_slice);
    match global.output {
        Format::Json => output::json(&response),
        Format::Table => {
            let rows: Vec<Vec<String>> = nodes
                .iter()
                .map(|n| {
                    vec![
                        output::text(&n["name"]),
                        gpus_in_words(&n["gpus"]),
                        output::text(&n["cpus"]),
                        output::text(&n["health"]),
                        match (n["draining"].as_bool(), n["cordoned"].as_bool()) {
                            (Some(true), _) => "draining",
                            (_, Some(true)) => "cordoned",
                            _ => "schedulable",
                        }
                        .to_owned(),
                        n["tasks"].as_array().map_or(0, Vec::len).to_string(),
                        match n["isolation"].as_str() {
                            Some("runc") => "sandboxed",
                            Some("pod") => "as Pods",
                            Some("none") => "UNCONFINED",
                            _ => "unknown",
                        }
                        .to_owned(),
                        if n["runs_images"].as_bool() == Some(true) {
                            "yes"
                        } else {
                            "no"
                        }
                        .to_owned(),
                        n["labels"]
                            .as_object()
                            .into_iter()
                            .flatten()
                            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                            .chain(n["taints"].as_array().into_iter().flatten().map(|t| {
                                format!(
                                    "{}={}:NoSchedule",
                                    t["key"].as_str().unwrap_or_default(),
                                    t["value"].as_str().unwrap_or_default()
                                )
                            }))
                            .collect::<Vec<_>>()
                            .join(","),
                    ]
                })
                .collect();
            output::table(
                &[
                    "NAME",
                    "GPUS",
                    "CPUS",
                    "HEALTH",
                    "STATUS",
                    "TASKS",
                    "TASKS RUN",
                    "IMAGES",
                    "LABELS AND TAINTS",
                ],
                &rows,
            );
            if nodes.is_empty() {
                eprintln!("(no nodes have registered)");
            }
        }
    }
    Ok(())
}

pub async fn whoami(global: &GlobalArgs) -> anyhow::Result<()> {
    let response = Client::new(global).await?.get("/api/v1/me").await?;
    match global.output {
        Format::Json => output::json(&response),
        Format::Table => {
            let user = &response["user"];
            let admin = if user["cluster_admin"].as_bool() == Some(true) {
                ", cluster administrator"
            } else {
                ""
            };
            out!(
                "{} ({} in tenant {}{admin})",
                output::text(&user["name"]),
                output::text(&user["role"]),
                output::text(&user["tenant"])
            );
        }
    }
    Ok(())
}

/// `drover audit`: the newest privileged actions (cluster administrators).
pub async fn audit(global: &GlobalArgs, limit: u32) -> anyhow::Result<()> {
    let response = Client::new(global)
        .await?
        .get(&format!("/api/v1/audit?limit={limit}"))
        .await?;
    let events = response["events"].as_array().map_or(&[][..], Vec::as_slice);
    match global.output {
        Format::Json => output::json(&response),
        Format::Table => {
            let rows: Vec<Vec<String>> = events
                .iter()
                .map(|e| {
                    vec![
                        output::text(&e["at"]),
                        output::text(&e["actor"]),
                        output::text(&e["action"]),
                        output::text(&e["target"]),
                        output::text(&e["detail"]),
                    ]
                })
                .collect();
            output::table(&["AT", "ACTOR", "ACTION", "TARGET", "DETAIL"], &rows);
        }
    }
    Ok(())
}
