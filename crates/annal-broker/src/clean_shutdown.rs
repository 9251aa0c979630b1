//! The clean-shutdown file: how a restarted broker shows the controller that it stopped cleanly (KIP-966).
//!
//! After every partition is flushed and closed, the broker writes its last broker epoch to
//! `<data dir>/.kafka_cleanshutdown` (Kafka's name and JSON shape: `{"version":"0","broker_epoch":"N"}`). At the
//! next start the file is read and removed at once, before anything is served, so a crash of the new process is
//! never mistaken for a clean stop; the epoch read goes into the first BrokerRegistration as
//! PreviousBrokerEpoch. The controller compares it with the epoch it last registered for this node: equal means
//! nothing unflushed was lost, so the broker stays in the ELRs it was in; anything else (no file, a torn file,
//! another epoch) is an unclean restart and the broker leaves every ELR until it has caught up again.
//!
//! Beyond Kafka: a crash of the process alone loses nothing it wrote. Every `write(2)` that returned is in the
//! kernel's page cache, which outlives the process; only a crash of the machine (power, kernel) loses what was
//! not fsynced. So after each registration the broker also records its epoch and the kernel's boot id in
//! `<data dir>/.annal_running` (durably). A restart that finds no clean-shutdown file but finds that record with
//! the boot id the kernel reports now was a process crash on a machine that kept running: the record's epoch
//! goes into PreviousBrokerEpoch as a clean stop's would, and the broker keeps its ELR places. Otherwise (another
//! boot, no boot id, no record) the restart is unclean, as in Kafka. Found by the simulator: with every crash
//! treated as unclean, a process crash of the replicas that held a partition's data emptied its ELR, and the
//! controller recovered it on its last known leader, which had lost power and its unflushed writes
//! (`annal-sim --brokers --seed 31 --seconds 60 --power-losses 1`: 91 committed records truncated on the two
//! replicas that held them).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Kafka's `CleanShutdownFileHandler.CLEAN_SHUTDOWN_FILE_NAME`.
pub const FILE_NAME: &str = ".kafka_cleanshutdown";
/// A sane file is a few dozen bytes; anything much larger is not ours and is not read whole.
const MAX_FILE_BYTES: u64 = 4096;
/// What PreviousBrokerEpoch says when the last stop was not shown to be clean.
pub const UNKNOWN_EPOCH: i64 = -1;

fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE_NAME)
}

/// The running broker's record: its broker epoch and the boot id of the kernel it runs on.
pub const RUNNING_FILE_NAME: &str = ".annal_running";
/// A boot id is a UUID (36 characters); anything much longer is not one.
const BOOT_ID_MAX: usize = 128;

/// The kernel's boot id (`/proc/sys/kernel/random/boot_id`, new at every boot), or `None` where there is none.
pub fn kernel_boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    (!id.is_empty() && id.len() <= BOOT_ID_MAX).then(|| id.to_string())
}

/// Records that this process registered at `broker_epoch` on the machine boot `boot_id` (durably).
pub fn record_running(data_dir: &Path, broker_epoch: i64, boot_id: &str) -> std::io::Result<()> {
    let body = serde_json::json!({
        "version": "0",
        "broker_epoch": broker_epoch.to_string(),
        "boot_id": boot_id,
    })
    .to_string();
    let tmp = data_dir.join(format!("{RUNNING_FILE_NAME}.tmp"));
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(body.as_bytes())?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, data_dir.join(RUNNING_FILE_NAME))?;
    std::fs::File::open(data_dir)?.sync_all()
}

/// The epoch the last process registered at, if it crashed on this same machine boot (`boot_id`), so that
/// nothing it wrote was lost; `None` when that cannot be shown.
pub fn process_crash_epoch(data_dir: &Path, boot_id: &str) -> Option<i64> {
    let file = data_dir.join(RUNNING_FILE_NAME);
    if std::fs::metadata(&file).ok()?.len() > MAX_FILE_BYTES {
        return None;
    }
    let text = std::fs::read_to_string(&file).ok()?;
    let fields: HashMap<String, serde_json::Value> = serde_json::from_str(&text).ok()?;
    if fields.get("boot_id")?.as_str()? != boot_id {
        return None;
    }
    parse(&text)
}

/// Records that this broker stopped cleanly at `broker_epoch` (durably: the file and its directory entry are
/// synced before returning).
pub fn write(data_dir: &Path, broker_epoch: i64) -> std::io::Result<()> {
    let body = format!(r#"{{"version":"0","broker_epoch":"{broker_epoch}"}}"#);
    let tmp = data_dir.join(format!("{FILE_NAME}.tmp"));
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(body.as_bytes())?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path(data_dir))?;
    std::fs::File::open(data_dir)?.sync_all()
}

/// Reads and removes the file, returning the epoch it proves, or [`UNKNOWN_EPOCH`] when there is none or it
/// cannot be trusted. Fails only when the file exists and cannot be removed: serving with it in place would let
/// a later crash pass for a clean stop.
pub fn take(data_dir: &Path) -> std::io::Result<i64> {
    let file = path(data_dir);
    let epoch = match std::fs::metadata(&file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(UNKNOWN_EPOCH),
        Err(e) => return Err(e),
        Ok(meta) if meta.len() > MAX_FILE_BYTES => {
            tracing::warn!(file = %file.display(), bytes = meta.len(), "clean-shutdown file too large; ignored");
            UNKNOWN_EPOCH
        }
        Ok(_) => match std::fs::read_to_string(&file).map(|text| parse(&text)) {
            Ok(Some(epoch)) => epoch,
            Ok(None) | Err(_) => {
                tracing::warn!(file = %file.display(), "clean-shutdown file unreadable; treating the last stop as unclean");
                UNKNOWN_EPOCH
            }
        },
    };
    std::fs::remove_file(&file).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot remove {} ({e}); remove it by hand or fix the data directory's permissions",
                file.display()
            ),
        )
    })?;
    std::fs::File::open(data_dir)?.sync_all()?;
    Ok(epoch)
}

/// Kafka writes every value as a JSON string; numbers are accepted too. A negative epoch proves nothing.
fn parse(text: &str) -> Option<i64> {
    let fields: HashMap<String, serde_json::Value> = serde_json::from_str(text).ok()?;
    let epoch = match fields.get("broker_epoch")? {
        serde_json::Value::String(s) => s.parse::<i64>().ok()?,
        serde_json::Value::Number(n) => n.as_i64()?,
        _ => return None,
    };
    (epoch >= 0).then_some(epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_epoch_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 42).unwrap();
        assert_eq!(take(dir.path()).unwrap(), 42);
        // Taken: a crash of the new process must not pass for a clean stop.
        assert!(!dir.path().join(FILE_NAME).exists());
        assert_eq!(take(dir.path()).unwrap(), UNKNOWN_EPOCH);
    }

    #[test]
    fn a_process_crash_on_the_same_boot_proves_its_epoch_and_another_boot_does_not() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(process_crash_epoch(dir.path(), "boot-a"), None);
        record_running(dir.path(), 7, "boot-a").unwrap();
        assert_eq!(process_crash_epoch(dir.path(), "boot-a"), Some(7));
        assert_eq!(process_crash_epoch(dir.path(), "boot-b"), None);
        record_running(dir.path(), 9, "boot-a").unwrap();
        assert_eq!(process_crash_epoch(dir.path(), "boot-a"), Some(9));
        for body in [
            "",
            "{",
            r#"{"broker_epoch":"9"}"#,
            r#"{"boot_id":"boot-a"}"#,
        ] {
            std::fs::write(dir.path().join(RUNNING_FILE_NAME), body).unwrap();
            assert_eq!(process_crash_epoch(dir.path(), "boot-a"), None, "{body:?}");
        }
    }

    #[test]
    fn reads_the_file_kafka_writes() {
        let dir = tempfile::tempdir().unwrap();
        // Kafka's CleanShutdownFileHandler writes a Jackson map of strings.
        std::fs::write(
            dir.path().join(FILE_NAME),
            r#"{"broker_epoch":"17","version":"0"}"#,
        )
        .unwrap();
        assert_eq!(take(dir.path()).unwrap(), 17);
    }

    #[test]
    fn torn_or_foreign_files_prove_nothing_and_are_removed() {
        for body in [
            "",
            "{",
            r#"{"version":"0"}"#,
            r#"{"broker_epoch":"-5"}"#,
            r#"{"broker_epoch":"x"}"#,
            r#"{"broker_epoch":[1]}"#,
            "\u{0}\u{0}\u{0}",
        ] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(FILE_NAME), body).unwrap();
            assert_eq!(take(dir.path()).unwrap(), UNKNOWN_EPOCH, "{body:?}");
            assert!(!dir.path().join(FILE_NAME).exists());
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), vec![b' '; 10_000]).unwrap();
        assert_eq!(take(dir.path()).unwrap(), UNKNOWN_EPOCH);
    }
}
