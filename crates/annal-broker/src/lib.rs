//! Annal's broker: the Kafka wire protocol, topics and partitions, and (later) replication and coordinators.
//!
//! Entry point: [`run`] serves the Kafka protocol on the configured listener until `shutdown` resolves.
//! Storage is delegated to [`annal_log`]; this crate knows the network, the engine knows the disk.

pub mod config;
pub mod group;

pub use config::BrokerConfig;

/// Runs the broker until `shutdown` resolves, then stops accepting, finishes in-flight requests, flushes every
/// partition and marks a clean shutdown.
pub async fn run(
    config: BrokerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let _ = (config, shutdown);
    anyhow::bail!("the broker is not built yet")
}
