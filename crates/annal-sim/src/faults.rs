//! The faults of a run, all chosen up front from the seed: what, to whom, when and for how long.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;

/// One fault, applied at its start and undone at its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Voter `n` is cut off from every other host (the other voters and the client).
    Isolate(i32),
    /// Symmetric partition of voter `n` from the other voters only; the client still reaches it.
    Split(i32),
    /// Asymmetric partition: nothing from `from` reaches `to`, the other direction works.
    OneWay { from: i32, to: i32 },
    /// The link between two voters holds every message until the fault ends (then delivers them late).
    Hold(i32, i32),
    /// The link between two voters drops messages at random (breaking the TCP connection each time).
    Lossy(i32, i32),
    /// The link between two voters is slow: latency up to `ms` per message.
    Slow(i32, i32, u64),
    /// Voter `n`'s process dies (everything not on disk is lost) and restarts at the fault's end.
    Crash(i32),
    /// Voter `n`'s monotonic clock jumps `ms` forward at once (timers due in between fire together).
    ClockJump(i32, u64),
    /// Node `n`'s disk is full: its partitions' segment and index writes fail with `ENOSPC` after writing part
    /// of their bytes (`annal_log::disk_faults`); with `--disk-full-metadata` the metadata quorum's log's too:
    /// the broker then halts, and starts again once the disk has room (decision 0011).
    DiskFull(i32),
    /// Node `n`'s disk fails every fsync of its partitions' data with `EIO` (with `--disk-full-metadata`, of
    /// the metadata log's too): the broker halts at the first, the files whose fsync failed may lose what was
    /// not fsynced before (the run's power-loss budget decides), and the node starts again once the window
    /// ends (decision 0011).
    FsyncFails(i32),
    /// Node `n`'s disk is slow: every fsync the broker or the metadata log waits for takes `ms` (in
    /// simulated time).
    SlowFsync(i32, u64),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Isolate(n) => write!(f, "isolate n{n}"),
            Fault::Split(n) => write!(f, "split n{n} from the voters"),
            Fault::OneWay { from, to } => write!(f, "one-way partition n{from} -> n{to}"),
            Fault::Hold(a, b) => write!(f, "hold n{a} <-> n{b}"),
            Fault::Lossy(a, b) => write!(f, "lossy n{a} <-> n{b}"),
            Fault::Slow(a, b, ms) => write!(f, "slow n{a} <-> n{b} up to {ms} ms"),
            Fault::Crash(n) => write!(f, "crash n{n}"),
            Fault::ClockJump(n, ms) => write!(f, "clock of n{n} jumps {ms} ms"),
            Fault::DiskFull(n) => write!(f, "disk of n{n} full"),
            Fault::FsyncFails(n) => write!(f, "fsyncs of n{n} fail"),
            Fault::SlowFsync(n, ms) => write!(f, "fsyncs of n{n} take {ms} ms"),
        }
    }
}

/// A fault and when it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheduled {
    pub fault: Fault,
    pub start: Duration,
    pub end: Duration,
}

/// Faults one after another from `first` until `until`, with quiet gaps between them. They overlap only in two
/// patterns, on different voters so that undoing one never undoes another: half of the crashes of a voter come
/// with another voter cut off from the middle of the crash until after the restart, and one fault in eight is
/// the relay (below), where the voters that make a majority change while one of them is down.
pub fn schedule(rng: &mut StdRng, voters: i32, first: Duration, until: Duration) -> Vec<Scheduled> {
    let mut out = Vec::new();
    let mut at = first;
    loop {
        let length = Duration::from_millis(rng.gen_range(300..4_000));
        if at + length > until {
            return out;
        }
        let n = rng.gen_range(1..=voters);
        let other = {
            let o = rng.gen_range(1..voters);
            if o >= n {
                o + 1
            } else {
                o
            }
        };
        let third = (1..=voters).find(|v| *v != n && *v != other).unwrap_or(n);
        if voters >= 3 && rng.gen_ratio(1, 8) {
            // The relay: `third` falls behind (cut off), `n` crashes, then `third` comes back while `other`,
            // the one voter still up to date, is cut off, and `n` restarts. Raft must elect a voter whose log
            // holds everything committed: `n` (restarted from its disk), not `third`.
            let lag = Duration::from_millis(rng.gen_range(1_000..3_000));
            let down = Duration::from_millis(rng.gen_range(500..2_000));
            let cut = Duration::from_millis(rng.gen_range(3_000..6_000));
            let relay = [
                Scheduled {
                    fault: Fault::Isolate(third),
                    start: at,
                    end: at + lag,
                },
                Scheduled {
                    fault: Fault::Crash(n),
                    start: at + lag / 2,
                    end: at + lag + down,
                },
                Scheduled {
                    fault: Fault::Isolate(other),
                    start: at + lag,
                    end: at + lag + cut,
                },
            ];
            let end = at + lag + cut;
            if end > until {
                return out;
            }
            out.extend(relay);
            at = end + Duration::from_millis(rng.gen_range(100..2_000));
            continue;
        }
        let fault = match rng.gen_range(0..8) {
            0 => Fault::Isolate(n),
            1 => Fault::Split(n),
            2 => Fault::OneWay { from: n, to: other },
            3 => Fault::Hold(n, other),
            4 => Fault::Lossy(n, other),
            5 => Fault::Slow(n, other, rng.gen_range(50..500)),
            6 => Fault::Crash(n),
            _ => Fault::ClockJump(n, rng.gen_range(500..5_000)),
        };
        let crashed = matches!(fault, Fault::Crash(_));
        out.push(Scheduled {
            fault,
            start: at,
            end: at + length,
        });
        let mut end = at + length;
        if crashed && rng.gen_bool(0.5) {
            // A second voter is cut off while the first is down and stays cut off a while after it restarts:
            // the restarted voter and the third one must then make a majority on their own.
            let cut = Scheduled {
                fault: Fault::Isolate(other),
                start: at + length / 2,
                end: at + length + Duration::from_millis(rng.gen_range(200..3_000)),
            };
            end = cut.end;
            if end > until {
                return out;
            }
            out.push(cut);
        }
        at = end + Duration::from_millis(rng.gen_range(100..2_000));
    }
}

/// Up to `count` full-disk windows, drawn from their own stream (so the rest of the schedule, and every seed's
/// meaning, is the same whatever the budget), merged into `schedule` in start order. A window that would
/// overlap a crash or another window of the same node is left out (a start on a faulty disk is drawn on its own:
/// [`add_faulty_disk_start`]).
pub fn add_disk_fulls(
    rng: &mut StdRng,
    schedule: &mut Vec<Scheduled>,
    count: u32,
    voters: i32,
    first: Duration,
    until: Duration,
) {
    for _ in 0..count {
        let n = rng.gen_range(1..=voters);
        let length = Duration::from_millis(rng.gen_range(1_000..6_000));
        place_disk_window(rng, schedule, Fault::DiskFull(n), length, first, until);
    }
    schedule.sort_by_key(|s| s.start);
}

/// Draws where `fault` (a disk fault of one node) lasting `length` starts, between `first` and `until`, and adds it unless
/// it would overlap a crash or another disk fault of the same node, or come within a second of one (a node
/// restarted at one window's end would start on a faulty disk: [`add_faulty_disk_start`] draws those on purpose).
fn place_disk_window(
    rng: &mut StdRng,
    schedule: &mut Vec<Scheduled>,
    fault: Fault,
    length: Duration,
    first: Duration,
    until: Duration,
) {
    let latest = until.saturating_sub(length);
    if latest <= first {
        return;
    }
    let start =
        first + Duration::from_millis(rng.gen_range(0..(latest - first).as_millis() as u64));
    let end = start + length;
    let margin = Duration::from_secs(1);
    let node = fault.disk_of();
    let clashes = schedule
        .iter()
        .any(|s| s.fault.disk_of() == node && s.start <= end + margin && start <= s.end + margin);
    if !clashes {
        schedule.push(Scheduled { fault, start, end });
    }
}

/// Up to `count` fsync-fault windows (failing or slow, even odds), drawn from their own stream like
/// [`add_disk_fulls`] (so every seed means what it meant before with `count` 0) and merged into `schedule` in
/// start order. A window that would overlap a crash or another disk fault of the same node, or come within a
/// second of one, is left out: a node restarted at a window's end would otherwise start on a faulty disk.
pub fn add_fsync_faults(
    rng: &mut StdRng,
    schedule: &mut Vec<Scheduled>,
    count: u32,
    voters: i32,
    first: Duration,
    until: Duration,
) {
    for _ in 0..count {
        let n = rng.gen_range(1..=voters);
        let length = Duration::from_millis(rng.gen_range(1_000..6_000));
        let fault = if rng.gen_bool(0.5) {
            Fault::FsyncFails(n)
        } else {
            Fault::SlowFsync(n, rng.gen_range(50..1_500))
        };
        place_disk_window(rng, schedule, fault, length, first, until);
    }
    schedule.sort_by_key(|s| s.start);
}

/// With even odds, a full or fsync-failing disk under one crashed node's restart, so that the node starts on a
/// faulty disk: the window begins up to a second before the crash ends and lasts 1-6 s. Drawn from its own
/// stream (every seed's other faults stay where they were) and left out when that node has a disk fault of its
/// own within a second of the window, or when the schedule has no crash.
pub fn add_faulty_disk_start(rng: &mut StdRng, schedule: &mut Vec<Scheduled>, until: Duration) {
    let crashes: Vec<(i32, Duration)> = schedule
        .iter()
        .filter_map(|s| match s.fault {
            Fault::Crash(n) if s.end < until => Some((n, s.end)),
            _ => None,
        })
        .collect();
    if crashes.is_empty() || !rng.gen_bool(0.5) {
        return;
    }
    let (n, restart) = crashes[rng.gen_range(0..crashes.len())];
    let start = restart.saturating_sub(Duration::from_millis(rng.gen_range(0..1_000)));
    let end = start + Duration::from_millis(rng.gen_range(1_000..6_000));
    let fault = if rng.gen_bool(0.5) {
        Fault::DiskFull(n)
    } else {
        Fault::FsyncFails(n)
    };
    let margin = Duration::from_secs(1);
    let clashes = schedule.iter().any(|s| {
        s.fault.keeps_down(n) || matches!(s.fault, Fault::SlowFsync(m, _) if m == n)
    } && s.start <= end + margin && start <= s.end + margin);
    if !clashes {
        schedule.push(Scheduled { fault, start, end });
        schedule.sort_by_key(|s| s.start);
    }
}

impl Fault {
    /// The node whose disk or process this fault is about (crashes and disk faults), if any.
    pub fn disk_of(&self) -> Option<i32> {
        match *self {
            Fault::Crash(n)
            | Fault::DiskFull(n)
            | Fault::FsyncFails(n)
            | Fault::SlowFsync(n, _) => Some(n),
            _ => None,
        }
    }

    /// Whether node `n` may not be restarted while this fault holds (its disk would refuse the start).
    pub fn keeps_down(&self, n: i32) -> bool {
        matches!(*self, Fault::DiskFull(m) | Fault::FsyncFails(m) if m == n)
    }
}
