//! A one-line progress report on stderr for long-running commands, shown only when stderr is a terminal (so
//! pipes and logs stay clean). `ANNAL_PROGRESS=always` shows it anyway, one line per update (for logs and
//! tests); `ANNAL_PROGRESS=never` hides it.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Redraws at most this often: a terminal flooded with updates slows the command down.
const REDRAW_INTERVAL: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    /// Redraw one line in place (`\r`, clear to end of line).
    Terminal,
    /// One line per update, for a stderr that is not a terminal.
    Lines,
}

pub struct Progress {
    mode: Mode,
    last_draw: Option<Instant>,
    /// A line is on screen that `finish` must clear.
    drawn: bool,
}

impl Progress {
    /// Decides from `ANNAL_PROGRESS` and whether stderr is a terminal.
    pub fn for_stderr() -> Progress {
        let mode = match std::env::var("ANNAL_PROGRESS").as_deref() {
            Ok("always") if std::io::stderr().is_terminal() => Mode::Terminal,
            Ok("always") => Mode::Lines,
            Ok("never") => Mode::Off,
            _ if std::io::stderr().is_terminal() => Mode::Terminal,
            _ => Mode::Off,
        };
        Progress {
            mode,
            last_draw: None,
            drawn: false,
        }
    }

    /// No progress at all (e.g. while the user types the input).
    pub fn off() -> Progress {
        Progress {
            mode: Mode::Off,
            last_draw: None,
            drawn: false,
        }
    }

    /// Shows the line `describe` builds, unless one was shown less than `REDRAW_INTERVAL` ago. The line is only
    /// built when it will be shown.
    pub fn update(&mut self, describe: impl FnOnce() -> String) {
        if self.mode == Mode::Off
            || self
                .last_draw
                .is_some_and(|t| t.elapsed() < REDRAW_INTERVAL)
        {
            return;
        }
        self.last_draw = Some(Instant::now());
        self.draw(&describe());
    }

    /// Shows a final line now (whatever the interval), then leaves it in place.
    pub fn done(&mut self, line: &str) {
        if self.mode == Mode::Off {
            return;
        }
        self.draw(line);
        if self.mode == Mode::Terminal {
            let _ = std::io::stderr().write_all(b"\n");
        }
        self.drawn = false;
    }

    /// Removes the progress line, e.g. before printing an error or when the command ends.
    pub fn clear(&mut self) {
        if self.mode == Mode::Terminal && self.drawn {
            let _ = std::io::stderr().write_all(b"\r\x1b[2K");
            self.drawn = false;
        }
    }

    fn draw(&mut self, line: &str) {
        // Progress is best effort: a failed write to stderr must not fail the command.
        let mut err = std::io::stderr().lock();
        let _ = match self.mode {
            Mode::Terminal => write!(err, "\r\x1b[2K{line}"),
            Mode::Lines => writeln!(err, "{line}"),
            Mode::Off => Ok(()),
        };
        let _ = err.flush();
        self.drawn = self.mode == Mode::Terminal;
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn updates_are_rate_limited() {
        let mut p = Progress {
            mode: Mode::Lines,
            last_draw: None,
            drawn: false,
        };
        let mut built = 0;
        for _ in 0..100 {
            p.update(|| {
                built += 1;
                String::new()
            });
        }
        assert_eq!(
            built, 1,
            "one line per interval, and lines are only built when shown"
        );
    }
}
