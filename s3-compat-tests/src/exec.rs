//! Running one client step and reporting it.
//!
//! Every step is a subprocess with a time limit. Its exit code and output are kept so an
//! assertion failure reads: `[aws-cli] step 'list prefix' ...` followed by the command line, the
//! exit status and both output streams.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Default limit for one client invocation; generous for a 2-core machine under load.
const STEP_TIMEOUT: Duration = Duration::from_secs(180);
/// Output shown in failure messages is cut to this many bytes per stream.
const SHOWN_OUTPUT_BYTES: usize = 6000;

/// A client command being prepared.
pub struct Cmd {
    client: String,
    program: PathBuf,
    args: Vec<OsString>,
    envs: Vec<(OsString, Option<OsString>)>,
    cwd: Option<PathBuf>,
    timeout: Duration,
}

impl Cmd {
    /// `client` names the client in failure messages (`aws-cli`, `mc`, ...).
    pub fn new(client: &str, program: impl AsRef<Path>) -> Cmd {
        Cmd {
            client: client.to_string(),
            program: program.as_ref().to_path_buf(),
            args: Vec::new(),
            envs: Vec::new(),
            cwd: None,
            timeout: STEP_TIMEOUT,
        }
    }

    /// Append one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Cmd {
        self.args.push(arg.into());
        self
    }

    /// Append several arguments, in order.
    pub fn args<I, S>(mut self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Set an environment variable for the client (the rest of the environment is inherited).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Cmd {
        self.envs.push((key.into(), Some(value.into())));
        self
    }

    /// Remove a variable from the client's environment, so a setting of the machine running
    /// the tests cannot leak into the step.
    pub fn env_remove(mut self, key: impl Into<OsString>) -> Cmd {
        self.envs.push((key.into(), None));
        self
    }

    /// Run the client in `dir` instead of the test's working directory.
    pub fn cwd(mut self, dir: impl AsRef<Path>) -> Cmd {
        self.cwd = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Replace the default 180 s time limit; past it the client's whole process group is
    /// killed and the outcome marked `timed_out`.
    pub fn timeout(mut self, timeout: Duration) -> Cmd {
        self.timeout = timeout;
        self
    }

    /// The configured `std::process::Command` (stdin null, stdout and stderr piped), for steps
    /// that must read a client's output while it runs.
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        // Its own process group, so a timeout kills the client and anything it started (a
        // surviving grandchild would hold the output pipes open and hang the step).
        command.process_group(0);
        for (key, value) in &self.envs {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        command
    }

    /// Run the command to completion (or its time limit) and keep everything it printed.
    pub fn run(self, step: &str) -> Outcome {
        let mut command = self.command();
        let cmdline = self.cmdline();
        let started = Instant::now();
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("[{}] step '{step}': cannot start `{cmdline}`: {e}", self.client));
        let stdout = child.stdout.take().map(read_in_background);
        let stderr = child.stderr.take().map(read_in_background);
        let deadline = started + self.timeout;
        let mut timed_out = false;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() >= deadline => {
                    timed_out = true;
                    kill_process_group(child.id());
                    let _ = child.kill();
                    break child.wait().ok();
                }
                Ok(None) => thread::sleep(Duration::from_millis(10)),
                Err(e) => panic!("[{}] step '{step}': waiting for `{cmdline}` failed: {e}", self.client),
            }
        };
        let stdout = stdout.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        let stderr = stderr.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        Outcome {
            client: self.client,
            step: step.to_string(),
            cmdline,
            code: status.and_then(|s| s.code()),
            timed_out,
            elapsed: started.elapsed(),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }

    fn cmdline(&self) -> String {
        let mut parts = vec![self.program.display().to_string()];
        parts.extend(self.args.iter().map(|a| {
            let text = a.to_string_lossy();
            if text.len() > 200 {
                format!("{}...({} bytes)", &text[..floor_boundary(&text, 120)], text.len())
            } else {
                text.into_owned()
            }
        }));
        parts.join(" ")
    }
}

/// SIGKILL every process in the group led by `pid`.
fn kill_process_group(pid: u32) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

fn read_in_background(mut stream: impl Read + Send + 'static) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        bytes
    })
}

/// What a finished step printed and returned.
#[derive(Debug)]
pub struct Outcome {
    /// The client's name, as given to `Cmd::new`.
    pub client: String,
    /// What the step was for, as given to `Cmd::run`.
    pub step: String,
    /// The program and its arguments joined by spaces, arguments over 200 bytes shortened.
    pub cmdline: String,
    /// `None` when killed by a signal (including our timeout).
    pub code: Option<i32>,
    /// Whether the step ran past its time limit and was killed.
    pub timed_out: bool,
    /// Wall-clock time from start to exit (or to the kill).
    pub elapsed: Duration,
    /// Everything the client wrote to stdout (invalid UTF-8 replaced).
    pub stdout: String,
    /// Everything the client wrote to stderr (invalid UTF-8 replaced).
    pub stderr: String,
}

impl Outcome {
    /// Assert exit code 0. Returns `self` so checks can chain.
    #[track_caller]
    pub fn ok(self) -> Outcome {
        if self.code != Some(0) || self.timed_out {
            self.fail("expected exit code 0");
        }
        self
    }

    /// Assert that the client reported failure (non-zero exit, not a timeout or a crash).
    #[track_caller]
    pub fn fails(self) -> Outcome {
        match self.code {
            Some(code) if code != 0 && !self.timed_out => self,
            _ => self.fail("expected the client to fail with a non-zero exit code"),
        }
    }

    /// Both streams together, for clients that report errors on either.
    pub fn all_output(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }

    /// Assert that stdout or stderr contains `needle`.
    #[track_caller]
    pub fn mentions(self, needle: &str) -> Outcome {
        if !self.all_output().contains(needle) {
            self.fail(&format!("expected the output to contain {needle:?}"));
        }
        self
    }

    /// Assert that stdout contains `needle`.
    #[track_caller]
    pub fn stdout_has(self, needle: &str) -> Outcome {
        if !self.stdout.contains(needle) {
            self.fail(&format!("expected stdout to contain {needle:?}"));
        }
        self
    }

    /// Parse stdout as one JSON document.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        match serde_json::from_str(self.stdout.trim()) {
            Ok(value) => value,
            Err(e) => self.fail(&format!("stdout is not JSON: {e}")),
        }
    }

    /// Parse stdout as JSON lines (mc --json, k6 summaries); blank lines are skipped.
    #[track_caller]
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        let mut values = Vec::new();
        for line in self.stdout.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str(line) {
                Ok(value) => values.push(value),
                Err(e) => self.fail(&format!("stdout line is not JSON ({e}): {line}")),
            }
        }
        values
    }

    /// Assert a condition about this step's result.
    #[track_caller]
    pub fn check(&self, condition: bool, what: &str) {
        if !condition {
            self.fail(what);
        }
    }

    /// Assert two values are equal, naming what was compared.
    #[track_caller]
    pub fn check_eq<T: PartialEq + std::fmt::Debug>(&self, actual: T, expected: T, what: &str) {
        if actual != expected {
            self.fail(&format!("{what}: expected {expected:?}, got {actual:?}"));
        }
    }

    /// Assert two key lists are equal, in order; on failure show the counts, the first
    /// difference and a sample of missing and unexpected keys instead of thousands of keys.
    #[track_caller]
    pub fn check_keys(&self, actual: &[String], expected: &[String], what: &str) {
        if let Some(diff) = describe_key_difference(actual, expected) {
            self.fail(&format!("{what}: {diff}"));
        }
    }

    /// Fail the test with the client, the step, the command and everything it printed.
    #[track_caller]
    pub fn fail(&self, why: &str) -> ! {
        let status = match (self.code, self.timed_out) {
            (_, true) => format!("killed after the {:?} time limit", self.elapsed),
            (Some(code), false) => format!("exit code {code}"),
            (None, false) => "killed by a signal".to_string(),
        };
        panic!(
            "[{}] step '{}' failed: {why}\n  command: {}\n  status: {status} after {:.1}s\n\
             --- stdout ---\n{}\n--- stderr ---\n{}",
            self.client,
            self.step,
            self.cmdline,
            self.elapsed.as_secs_f64(),
            shown(&self.stdout),
            shown(&self.stderr)
        );
    }
}

fn shown(text: &str) -> &str {
    if text.len() <= SHOWN_OUTPUT_BYTES {
        text
    } else {
        &text[floor_boundary(text, text.len() - SHOWN_OUTPUT_BYTES)..]
    }
}

/// The largest char boundary at or below `index` (slicing must not split a UTF-8 sequence).
pub fn floor_boundary(text: &str, index: usize) -> usize {
    let mut index = index.min(text.len());
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

/// `None` if equal; otherwise a short description of how two ordered key lists differ.
pub fn describe_key_difference(actual: &[String], expected: &[String]) -> Option<String> {
    if actual == expected {
        return None;
    }
    use std::collections::BTreeSet;
    let want: BTreeSet<&String> = expected.iter().collect();
    let got: BTreeSet<&String> = actual.iter().collect();
    let missing: Vec<&&String> = want.difference(&got).take(8).collect();
    let extra: Vec<&&String> = got.difference(&want).take(8).collect();
    let first =
        actual.iter().zip(expected).position(|(a, e)| a != e).unwrap_or(actual.len().min(expected.len()));
    Some(format!(
        "{} keys, expected {}; first difference at index {first}: got {:?}, expected {:?}; \
         missing (first 8): {missing:?}; unexpected (first 8): {extra:?}; duplicates: {}",
        actual.len(),
        expected.len(),
        actual.get(first),
        expected.get(first),
        actual.len() - got.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_difference_names_missing_and_unexpected_keys() {
        let expected = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        assert_eq!(describe_key_difference(&expected, &expected), None);
        let got = vec!["a".to_string(), "c".to_string(), "z".to_string()];
        let diff = describe_key_difference(&got, &expected).unwrap_or_default();
        assert!(diff.contains("index 1"), "{diff}");
        assert!(diff.contains("\"b\""), "{diff}");
        assert!(diff.contains("\"z\""), "{diff}");
    }

    #[test]
    fn floor_boundary_never_splits_a_character() {
        let text = "a\u{e9}\u{1f600}";
        for i in 0..=text.len() {
            assert!(text.is_char_boundary(floor_boundary(text, i)));
        }
        assert_eq!(floor_boundary(text, 3), 3);
        assert_eq!(floor_boundary(text, 4), 3);
    }

    #[test]
    fn a_failing_step_reports_client_step_and_output() {
        let outcome = Cmd::new("sh", "/bin/sh").args(["-c", "echo out; echo err >&2; exit 3"]).run("demo");
        assert_eq!(outcome.code, Some(3));
        let message = std::panic::catch_unwind(|| {
            outcome.ok();
        })
        .err()
        .and_then(|e| e.downcast_ref::<String>().cloned())
        .unwrap_or_default();
        assert!(message.contains("[sh] step 'demo'"), "{message}");
        assert!(
            message.contains("exit code 3") && message.contains("out") && message.contains("err"),
            "{message}"
        );
    }

    #[test]
    fn a_step_over_its_time_limit_is_killed() {
        let outcome = Cmd::new("sh", "/bin/sh")
            .args(["-c", "sleep 30"])
            .timeout(Duration::from_millis(200))
            .run("slow");
        assert!(outcome.timed_out);
        assert!(outcome.elapsed < Duration::from_secs(10));
    }
}
