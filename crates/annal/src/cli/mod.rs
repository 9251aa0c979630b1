//! The client commands of the `annal` binary: `topic`, `produce`, `consume`, `group`, `producers`, `cluster`, `lookup`.
//! They speak the Kafka protocol, so they work against any Kafka-compatible broker, not only `annal serve`.

pub mod cluster;
pub mod consume;
pub mod group;
pub mod group_offsets;
pub mod health;
pub mod lag;
pub mod lookup;
pub mod output;
pub mod produce;
pub mod producers;
pub mod progress;
pub mod template;
pub mod time;
pub mod topic;
pub mod topic_partitions;

use anyhow::{anyhow, Result};

use annal_client::Client;

pub const DEFAULT_BROKERS: &str = "127.0.0.1:9092";

/// Where the broker is. Shared by every client command.
#[derive(clap::Args, Debug, Clone)]
pub struct BrokerArgs {
    /// Broker address(es) to bootstrap from, HOST:PORT, comma-separated to try several.
    #[arg(short = 'b', long = "brokers", env = "ANNAL_BROKERS", default_value = DEFAULT_BROKERS,
          value_name = "HOST:PORT", global = true)]
    pub brokers: String,
}

/// Parses `key=value` (the value may be empty or contain '=').
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected key=value, got '{s}'")),
    }
}

/// Connects to the first reachable broker of a comma-separated list.
pub async fn connect(brokers: &str) -> Result<Client> {
    let addrs: Vec<&str> = brokers
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect();
    if addrs.is_empty() {
        return Err(anyhow!("no broker address given; use -b HOST:PORT"));
    }
    let mut last_err = None;
    for addr in &addrs {
        if !addr.contains(':') {
            return Err(anyhow!("broker address '{addr}' has no port; write it as HOST:PORT, e.g. {DEFAULT_BROKERS}"));
        }
        match Client::connect(addr).await {
            Ok(client) => return Ok(client),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.expect("at least one address was tried"))
}

/// Runs a client command on a single-threaded runtime: the CLI does one thing at a time.
/// `ANNAL_LOG=debug` shows connections and negotiated API versions on stderr.
pub fn block_on<F: std::future::Future<Output = Result<()>>>(fut: F) -> Result<()> {
    if let Ok(filter) = std::env::var("ANNAL_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .try_init();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(fut)
}

/// Writes to stdout end with a closed pipe (`annal consume t | head`) as a normal exit, not an error.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
        .any(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_parsing() {
        assert_eq!(
            parse_key_value("retention.ms=1000"),
            Ok(("retention.ms".into(), "1000".into()))
        );
        assert_eq!(parse_key_value("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert_eq!(parse_key_value("empty="), Ok(("empty".into(), "".into())));
        assert!(parse_key_value("novalue").is_err());
        assert!(parse_key_value("=v").is_err());
    }
}
