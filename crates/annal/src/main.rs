//! The `annal` binary: `annal serve` runs the broker; the other commands are Kafka-protocol clients.

mod cli;
mod dump;
mod partitioner;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "annal",
    version,
    about = "Annal: a Kafka-compatible distributed log",
    after_help = "Examples:
  annal serve --data-dir ./annal-data                  # start a broker on 127.0.0.1:9092
  annal topic create orders -p 3
  printf 'k1:hello\\nk2:world\\n' | annal produce orders --key-separator :
  annal consume orders --from-beginning
  annal consume orders -o -5 --format '%p:%o %k=%v\\n'   # the last 5 records of each partition
  annal topic describe orders -b 127.0.0.1:9092        # any Kafka-protocol broker works
  annal group describe billing                         # members, committed offsets, lag
  annal producers orders
  annal cluster health                                 # exit 1 if a partition is leaderless or under-replicated

Client commands read the broker address from -b/--brokers or $ANNAL_BROKERS (default 127.0.0.1:9092)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker.
    #[command(after_help = "Examples:
  annal serve
  annal serve --data-dir /var/lib/annal --listen 0.0.0.0:9092
  annal serve --config server.properties --override log.retention.ms=3600000")]
    Serve {
        /// Where this node keeps its data (replaces log.dirs).
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
        /// HOST:PORT of the client listener (replaces the first broker listener of `listeners`).
        #[arg(long)]
        listen: Option<String>,
        /// A Kafka server.properties file (KRaft combined, broker-only or controller-only).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// One Kafka setting, KEY=VALUE; applied after --config.
        #[arg(long = "override")]
        overrides: Vec<String>,
        /// The cluster id a new data directory is created with (every node of a cluster shares one; what
        /// `kafka-storage format -t` sets for Kafka). A directory that already has one must match it.
        #[arg(long)]
        cluster_id: Option<String>,
    },
    /// Create, list, describe, alter, delete, grow and trim topics.
    Topic(cli::topic::TopicArgs),
    /// Write records read from stdin, one per line.
    Produce(cli::produce::ProduceArgs),
    /// Read records and print them (alone or as a consumer group member).
    Consume(cli::consume::ConsumeArgs),
    /// List, describe (members, lag, retention risk), reset or delete offsets of, and delete consumer groups.
    Group(cli::group::GroupArgs),
    /// Show the producers writing to a topic's partitions (DescribeProducers).
    Producers(cli::producers::ProducersArgs),
    /// Describe the cluster (brokers, controller, partitions, metadata quorum) and check its health.
    Cluster(cli::cluster::ClusterArgs),
    /// Find the records with a key, from the broker's key index (topic config key.index.enable=true).
    Lookup(cli::lookup::LookupArgs),
    /// Print the segments and batches of a partition directory or segment file (like kafka-dump-log).
    #[command(after_help = "Examples:
  annal dump-log ./annal-data/orders-0
  annal dump-log ./annal-data/orders-0/00000000000000000000.log")]
    DumpLog(dump::DumpArgs),
}

fn main() {
    if let Err(err) = run(Cli::parse()) {
        if cli::is_broken_pipe(&err) {
            // The reader went away (`annal topic list | head`): nothing left to say.
            std::process::exit(0);
        }
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve {
            data_dir,
            listen,
            config,
            overrides,
            cluster_id,
        } => {
            annal_broker::init_tracing();
            // As Kafka's start scripts expect the operator to: use all the descriptors the hard limit allows
            // (log.open.files.max is sized from the result).
            if let Err(e) = annal_log::raise_nofile_soft_limit() {
                tracing::warn!(error = %e, "cannot raise the open-file soft limit (RLIMIT_NOFILE) to the hard limit");
            }
            let mut cfg =
                annal_broker::BrokerConfig::load(config.as_deref(), &overrides, data_dir, listen)?;
            cfg.cluster_id = cluster_id;
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(annal_broker::run(cfg, annal_broker::shutdown_signal()))
        }
        Command::Topic(args) => cli::block_on(cli::topic::run(args)),
        Command::Produce(args) => cli::block_on(cli::produce::run(args)),
        Command::Consume(args) => cli::block_on(cli::consume::run(args)),
        Command::Group(args) => cli::block_on(cli::group::run(args)),
        Command::Producers(args) => cli::block_on(cli::producers::run(args)),
        Command::Cluster(args) => cli::block_on(cli::cluster::run(args)),
        Command::Lookup(args) => cli::block_on(cli::lookup::run(args)),
        Command::DumpLog(args) => dump::run(&args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("annal").chain(args.iter().copied()))
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn topic_create_arguments() {
        let cli = parse(&[
            "topic",
            "create",
            "orders",
            "-p",
            "3",
            "-r",
            "1",
            "-c",
            "retention.ms=5",
            "-c",
            "a=b",
        ])
        .unwrap();
        let Command::Topic(t) = cli.command else {
            panic!("not topic")
        };
        if std::env::var_os("ANNAL_BROKERS").is_none() {
            assert_eq!(t.broker.brokers, cli::DEFAULT_BROKERS);
        }
        match t.command {
            cli::topic::TopicCommand::Create {
                name,
                partitions,
                replication_factor,
                configs,
            } => {
                assert_eq!(name, "orders");
                assert_eq!(partitions, Some(3));
                assert_eq!(replication_factor, Some(1));
                assert_eq!(
                    configs,
                    vec![
                        ("retention.ms".into(), "5".into()),
                        ("a".into(), "b".into())
                    ]
                );
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(parse(&["topic", "create", "orders", "-p", "0"]).is_err());
        assert!(parse(&["topic", "create", "orders", "-c", "novalue"]).is_err());
    }

    #[test]
    fn brokers_flag_after_subcommand() {
        let cli = parse(&["topic", "list", "-b", "h:1"]).unwrap();
        let Command::Topic(t) = cli.command else {
            panic!("not topic")
        };
        assert_eq!(t.broker.brokers, "h:1");
        let cli = parse(&["consume", "t", "--brokers", "h:2"]).unwrap();
        let Command::Consume(c) = cli.command else {
            panic!("not consume")
        };
        assert_eq!(c.broker.brokers, "h:2");
    }

    #[test]
    fn produce_arguments() {
        let cli = parse(&[
            "produce",
            "t",
            "--key-separator",
            ":",
            "-H",
            "a=1",
            "-H",
            "b=",
            "--compression",
            "zstd",
            "--acks",
            "1",
        ])
        .unwrap();
        let Command::Produce(p) = cli.command else {
            panic!("not produce")
        };
        assert_eq!(p.topic, "t");
        assert_eq!(p.key_separator.as_deref(), Some(":"));
        assert_eq!(
            p.headers,
            vec![("a".into(), "1".into()), ("b".into(), "".into())]
        );
        assert_eq!(p.compression, cli::produce::Codec::Zstd);
        assert_eq!(p.acks, 1);
        let Command::Produce(p) = parse(&["produce", "t"]).unwrap().command else {
            panic!()
        };
        assert_eq!(p.acks, -1, "acks defaults to all, like Kafka 3+ producers");
        assert_eq!(p.compression, cli::produce::Codec::None);
        assert!(parse(&["produce", "t", "--compression", "brotli"]).is_err());
        assert!(parse(&["produce", "t", "--acks", "2"]).is_err());
    }

    #[test]
    fn consume_start_options_are_exclusive() {
        let Command::Consume(c) = parse(&[
            "consume", "t", "-p", "1", "--offset", "5", "-n", "3", "--format", "json",
        ])
        .unwrap()
        .command
        else {
            panic!()
        };
        assert_eq!(
            (c.partition, c.offset, c.count),
            (Some(1), Some(cli::consume::StartOffset::At(5)), Some(3))
        );
        assert_eq!(
            c.format,
            cli::consume::RecordFormat::Builtin(cli::output::Format::Json)
        );
        assert!(!c.follow && !c.from_beginning);
        assert!(parse(&["consume", "t", "--from-beginning", "--offset", "1"]).is_err());
        assert!(parse(&["consume", "t", "--offset", "1", "--timestamp", "5"]).is_err());
        // `-o -N` is the last N records; `-o -0` means nothing.
        let Command::Consume(c) = parse(&["consume", "t", "-o", "-3"]).unwrap().command else {
            panic!()
        };
        assert_eq!(c.offset, Some(cli::consume::StartOffset::Last(3)));
        assert!(parse(&["consume", "t", "--offset", "-0"]).is_err());
        assert!(parse(&["consume", "t", "-G", "g", "-p", "1"]).is_err());
        assert!(parse(&["consume", "t", "--from-beginning", "--follow"]).is_ok());
    }

    #[test]
    fn group_reset_needs_exactly_one_target() {
        let Command::Group(g) = parse(&[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "-p",
            "0,2",
            "--to-offset",
            "5",
            "--execute",
        ])
        .unwrap()
        .command
        else {
            panic!("not group")
        };
        let cli::group::GroupCommand::ResetOffsets(r) = g.command else {
            panic!("not reset-offsets")
        };
        assert_eq!((r.group.as_str(), r.topic.as_str()), ("g", "t"));
        assert_eq!(r.partitions, vec![0, 2]);
        assert_eq!(r.to_offset, Some(5));
        assert!(r.execute && !r.to_earliest);
        let base = ["group", "reset-offsets", "g", "--topic", "t"];
        let with = |extra: &[&str]| parse(&[&base[..], extra].concat());
        assert!(with(&[]).is_err(), "a target is required");
        assert!(with(&["--to-earliest", "--to-latest"]).is_err());
        assert!(with(&["--to-offset", "-1"]).is_err());
        assert!(with(&["--to-datetime", "soon"]).is_err());
        assert!(with(&["--shift-by", "-5"]).is_ok());
        assert!(with(&["--to-latest", "--dry-run", "--execute"]).is_err());
        assert!(
            parse(&["group", "reset-offsets", "g", "--to-earliest"]).is_err(),
            "--topic is required"
        );
        assert!(parse(&["group", "delete"]).is_err(), "at least one group");
        let Command::Group(g) = parse(&["group", "list", "--state", "stable,EMPTY"])
            .unwrap()
            .command
        else {
            panic!()
        };
        let cli::group::GroupCommand::List { states, .. } = g.command else {
            panic!()
        };
        assert_eq!(states, vec!["Stable".to_string(), "Empty".to_string()]);
        let Command::Producers(p) = parse(&["producers", "t", "-p", "1", "-b", "h:1"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert_eq!((p.topic.as_str(), p.partitions.as_slice()), ("t", &[1][..]));
        assert_eq!(p.broker.brokers, "h:1");
    }

    #[test]
    fn every_command_has_examples_in_its_help() {
        fn check(cmd: &clap::Command, path: &str) {
            let path = format!("{path} {}", cmd.get_name());
            if cmd.get_name() != "help" {
                let help = cmd
                    .get_after_help()
                    .map(|h| h.to_string())
                    .unwrap_or_default();
                assert!(
                    help.contains("Examples:"),
                    "`{path}` has no examples in its help"
                );
            }
            for sub in cmd.get_subcommands() {
                check(sub, &path);
            }
        }
        check(&Cli::command(), "");
    }
}
