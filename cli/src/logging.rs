//! How the long-running commands (the server, `drover dev`, the executor) log: to standard error, as
//! text or JSON ([`LogFormat`]), filtered by `DROVER_LOG` ([`init_tracing`]).

/// How log lines are written: text for a person, JSON for a log collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Sends this process's logs to standard error in `format`, filtered by `DROVER_LOG` or else by
/// `default_filter`.
pub fn init_tracing(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DROVER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // Colours only for a person at a terminal: a redirected log stays plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
