//! `annal dump-log`: inspect a partition directory or a segment file, in the spirit of kafka-dump-log.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct DumpArgs {
    /// A partition directory or a `.log` segment file.
    pub path: PathBuf,
}

pub fn run(args: &DumpArgs) -> anyhow::Result<()> {
    anyhow::bail!("dump-log is not built yet: {}", args.path.display())
}
