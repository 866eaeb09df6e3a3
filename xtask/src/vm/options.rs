//! The options of `cargo xtask vm`.

use std::ffi::OsString;
use std::time::Duration;

use crate::failure::{Failure, Result};
use crate::vm::qemu::Accel;

pub(crate) const USAGE: &str = "\
usage: cargo xtask vm [OPTIONS] [--] CMD [ARGS...]

Runs CMD in a qemu VM with a soft-RoCE device rxe0 (host / read-only with a
RAM overlay, the current directory read-write) and exits with its status
(124: --timeout expired, 125: the VM or its setup failed).

options:
  --timeout SECS       whole run, all boot attempts included (default 1800)
  --boot-timeout SECS  a boot not done by then is retried, 3 tries (default 120)
  --mem SIZE           guest RAM (default 2G)
  --smp N              vCPUs per guest (default 2; 1 with --hosts 2)
  --hosts N            1, or 2 VMs joined by a virtual wire (192.168.78.1/.2)
  --accel auto|tcg|kvm (default auto: kvm only with vmx/svm and a usable /dev/kvm)
  --verbose            show the guest console on stderr";

/// What `cargo xtask vm` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct VmOptions {
    pub(crate) timeout: Duration,
    pub(crate) boot_timeout: Duration,
    pub(crate) mem: String,
    /// `None`: 2, or 1 per guest with several guests (two vCPUs each are
    /// slower on every measure on a 2-core host).
    pub(crate) smp: Option<u32>,
    pub(crate) hosts: usize,
    pub(crate) accel: Accel,
    pub(crate) verbose: bool,
    pub(crate) command: Vec<OsString>,
}

impl VmOptions {
    /// Defaults for running `command`.
    pub(crate) fn new(command: Vec<OsString>) -> VmOptions {
        VmOptions {
            timeout: Duration::from_secs(1800),
            boot_timeout: Duration::from_secs(120),
            mem: "2G".into(),
            smp: None,
            hosts: 1,
            accel: Accel::Auto,
            verbose: false,
            command,
        }
    }
}

/// Parses the arguments after `vm`; `None` means `--help`.
pub(crate) fn parse(args: &[OsString]) -> Result<Option<VmOptions>> {
    let mut opts = VmOptions::new(Vec::new());
    let mut i = 0;
    while i < args.len() {
        let Some(arg) = args[i].to_str() else { break };
        if arg == "--" {
            i += 1;
            break;
        }
        if !arg.starts_with('-') {
            break;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (arg, None),
        };
        let mut value = || -> Result<String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            i += 1;
            args.get(i)
                .and_then(|v| v.to_str())
                .map(String::from)
                .ok_or_else(|| usage_error(&format!("{name} needs a value")))
        };
        match name {
            "-h" | "--help" => return Ok(None),
            "--verbose" | "-v" => opts.verbose = true,
            "--timeout" => opts.timeout = seconds(name, &value()?)?,
            "--boot-timeout" => opts.boot_timeout = seconds(name, &value()?)?,
            "--mem" => opts.mem = memory(&value()?)?,
            "--smp" => opts.smp = Some(count(name, &value()?, 1..=64)?),
            "--hosts" => opts.hosts = count(name, &value()?, 1..=2)? as usize,
            "--accel" => {
                let v = value()?;
                opts.accel = Accel::parse(&v).ok_or_else(|| {
                    usage_error(&format!("--accel must be auto, tcg or kvm, not {v:?}"))
                })?;
            }
            _ => return Err(usage_error(&format!("unknown option {arg}"))),
        }
        i += 1;
    }
    opts.command = args[i.min(args.len())..].to_vec();
    if opts.command.is_empty() {
        return Err(usage_error("no command given"));
    }
    Ok(Some(opts))
}

fn usage_error(what: &str) -> Failure {
    Failure::with_status(format!("{what}\n{USAGE}"), 2)
}

fn seconds(name: &str, text: &str) -> Result<Duration> {
    match text.parse::<u64>() {
        Ok(secs) if secs > 0 => Ok(Duration::from_secs(secs)),
        _ => Err(usage_error(&format!(
            "{name} takes a whole number of seconds > 0, not {text:?}"
        ))),
    }
}

fn count(name: &str, text: &str, range: std::ops::RangeInclusive<u32>) -> Result<u32> {
    match text.parse::<u32>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(usage_error(&format!(
            "{name} takes a number from {} to {}, not {text:?}",
            range.start(),
            range.end()
        ))),
    }
}

/// qemu's `-m` syntax: a number with an optional K/M/G/T suffix.
fn memory(text: &str) -> Result<String> {
    let digits = text.trim_end_matches(['K', 'M', 'G', 'T', 'k', 'm', 'g', 't']);
    let suffix_len = text.len() - digits.len();
    if suffix_len <= 1 && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        Ok(text.to_string())
    } else {
        Err(usage_error(&format!(
            "--mem takes a size such as 2G or 1536M, not {text:?}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_flags_and_command() {
        let opts = parse(&args(&[
            "--timeout",
            "20",
            "--mem=1G",
            "--verbose",
            "--",
            "sh",
            "-c",
            "exit 7",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(opts.timeout, Duration::from_secs(20));
        assert_eq!(opts.mem, "1G");
        assert!(opts.verbose);
        assert_eq!(opts.command, args(&["sh", "-c", "exit 7"]));
    }

    #[test]
    fn command_may_start_without_double_dash() {
        let opts = parse(&args(&["--hosts", "2", "ibv_devinfo", "-d", "rxe0"]))
            .unwrap()
            .unwrap();
        assert_eq!(opts.hosts, 2);
        assert_eq!(opts.command, args(&["ibv_devinfo", "-d", "rxe0"]));
    }

    #[test]
    fn rejects_bad_input() {
        for bad in [
            &["--timeout", "x", "true"][..],
            &["--mem", "2X", "true"],
            &["--hosts", "3", "true"],
            &["--bogus", "true"],
            &[],
            &["--"],
            &["--timeout"],
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?}");
        }
        assert!(parse(&args(&["--help"])).unwrap().is_none());
    }
}
