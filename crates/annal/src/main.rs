//! The `annal` binary: `annal serve` runs the broker; the other commands are Kafka-protocol clients.

mod dump;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "annal",
    version,
    about = "Annal: a Kafka-compatible distributed log"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker.
    Serve {
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
        #[arg(long)]
        listen: Option<String>,
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        #[arg(long = "override")]
        overrides: Vec<String>,
    },
    /// Print the segments and batches of a partition directory or segment file (like kafka-dump-log).
    DumpLog(dump::DumpArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            data_dir,
            listen,
            config,
            overrides,
        } => {
            annal_broker::init_tracing();
            let cfg =
                annal_broker::BrokerConfig::load(config.as_deref(), &overrides, data_dir, listen)?;
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(annal_broker::run(cfg, annal_broker::shutdown_signal()))
        }
        Command::DumpLog(args) => dump::run(&args),
    }
}
