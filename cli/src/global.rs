//! What every command may be handed from the top of the program: the global options
//! ([`GlobalArgs`]: the server, the token, the output format, the data directory) and the error a
//! command ends with when a signal stopped it ([`Interrupted`]), which `main` turns into exit code 130.

use crate::output;
use std::path::PathBuf;

/// Options every client verb takes.
#[derive(Debug, clap::Args)]
pub struct GlobalArgs {
    /// The Drover server's URL (default: the current context's, else http://127.0.0.1:8080).
    #[arg(long, global = true, env = "DROVER_SERVER")]
    pub server: Option<String>,
    /// API token (default: the current context's; `drover login` and `drover dev` make contexts).
    #[arg(long, global = true, env = "DROVER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = output::Format::Table)]
    pub output: output::Format,
    /// Where `drover dev` keeps its data (its admin token is found there), and where the server keeps
    /// checkpoints unless told otherwise.
    #[arg(
        long,
        global = true,
        env = "DROVER_DATA_DIR",
        default_value = ".drover"
    )]
    pub data_dir: PathBuf,
}

/// A command stopped by a signal, after saying so: the process exits 130 with no further message.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}
