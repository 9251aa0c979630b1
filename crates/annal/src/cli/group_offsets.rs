//! `annal group delete-offsets GROUP --topic T [--partition P]` (OffsetDelete): forget a group's committed
//! offsets for a topic, e.g. after the group stopped reading it, so lag reports and retention checks stop
//! counting it.

use std::fmt::Write as _;

use anyhow::{bail, Result};

use annal_client::{group_error, Client};

pub async fn delete_offsets(
    client: &mut Client,
    group: &str,
    topic: &str,
    partitions: &[i32],
    out: &mut String,
) -> Result<()> {
    let committed = client.fetch_offsets(group).await?;
    let committed_partitions: Vec<i32> = committed
        .get(topic)
        .map(|parts| {
            parts
                .iter()
                .filter(|(_, c)| c.as_ref().is_ok_and(|c| c.offset >= 0))
                .map(|(&p, _)| p)
                .collect()
        })
        .unwrap_or_default();
    // Without --partition: every partition the group has an offset for (the topic itself may be gone).
    let mut targets: Vec<i32> = if partitions.is_empty() {
        committed_partitions.clone()
    } else {
        partitions.to_vec()
    };
    targets.sort_unstable();
    targets.dedup();
    if targets.is_empty() {
        bail!(
            "group '{group}' has no committed offsets for topic '{topic}'; see what it has with \
             `annal group describe {group}`"
        );
    }
    let (group_code, results) = client.delete_offsets(group, topic, &targets).await?;
    if group_code != 0 {
        bail!(
            "cannot delete the offsets of group '{group}' for topic '{topic}': {}",
            group_error(group, group_code)
        );
    }
    let mut deleted = Vec::new();
    let mut failures = Vec::new();
    for p in &targets {
        match results.get(p) {
            Some(0) if committed_partitions.contains(p) => deleted.push(*p),
            Some(0) => writeln!(
                out,
                "partition {p} of '{topic}' had no committed offset in group '{group}'"
            )?,
            Some(&code) => failures.push(format!("partition {p}: {}", group_error(group, code))),
            None => failures.push(format!(
                "partition {p}: the coordinator did not answer for it"
            )),
        }
    }
    if !deleted.is_empty() {
        writeln!(
            out,
            "deleted the committed offsets of group '{group}' for topic '{topic}', partition{} {}",
            if deleted.len() == 1 { "" } else { "s" },
            deleted
                .iter()
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    match failures.len() {
        0 => Ok(()),
        n => bail!(
            "{n} of {} partitions kept their offsets in group '{group}' for topic '{topic}':\n  {}",
            targets.len(),
            failures.join("\n  ")
        ),
    }
}
