//! Rendezvous addresses: `host`, `host:port` or `[v6]:port`, parsed
//! strictly (a port that does not parse is an error naming where it came
//! from, never a silent default), and the socket address rank 0 listens on.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use crate::error::BootstrapError;

/// A host and a port; port 0 asks the OS for a free one (rank 0 only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostPort {
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Parses `value`, which came from `name` (an environment variable, or
/// what the program passed); `default_port` when it names no port.
pub(crate) fn parse(
    name: &str,
    value: &str,
    default_port: u16,
) -> Result<HostPort, BootstrapError> {
    let bad = |reason: String| BootstrapError::MalformedVar {
        name: name.to_owned(),
        value: value.to_owned(),
        reason,
    };
    let v = value.trim();
    let bracketed = v.starts_with('[');
    let (host, port) = if let Some(rest) = v.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| bad("an IPv6 address opened with [ is not closed with ]".into()))?;
        if host.parse::<Ipv6Addr>().is_err() {
            return Err(bad(format!("{host:?} is not an IPv6 address")));
        }
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(bad("expected :PORT after the ]".into())),
            },
        }
    } else if v.parse::<Ipv6Addr>().is_ok() {
        return Err(bad(format!(
            "write an IPv6 address in brackets, as [{v}]:{default_port}"
        )));
    } else {
        match v.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (v, None),
        }
    };
    if host.is_empty() {
        return Err(bad("expected host:port; the host is empty".into()));
    }
    if !bracketed && host.contains(|c: char| c.is_whitespace() || c == ':' || c == '/') {
        return Err(bad(format!("{host:?} is not a host name or address")));
    }
    let port = match port {
        None => default_port,
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| bad(format!("the port {p:?} is not a number from 0 to 65535")))?,
    };
    Ok(HostPort {
        host: host.to_owned(),
        port,
    })
}

/// Where rank 0 listens for `hp`: the address itself when it is an IP
/// address (`127.0.0.1` stays on loopback, `0.0.0.0` is every interface),
/// loopback for `localhost`. Any other name listens on every interface of
/// its family: a host's own name may resolve differently on it than on the
/// other ranks (Debian maps it to 127.0.1.1), and binding that address
/// would shut them out.
pub(crate) fn listen_addr(hp: &HostPort) -> SocketAddr {
    if let Ok(ip) = hp.host.parse::<IpAddr>() {
        return SocketAddr::new(ip, hp.port);
    }
    let resolved: Vec<SocketAddr> = (hp.host.as_str(), hp.port)
        .to_socket_addrs()
        .map(Iterator::collect)
        .unwrap_or_default();
    if hp.host.eq_ignore_ascii_case("localhost") {
        if let Some(a) = resolved.iter().find(|a| a.ip().is_loopback()) {
            return *a;
        }
        return SocketAddr::new(Ipv4Addr::LOCALHOST.into(), hp.port);
    }
    if !resolved.is_empty() && resolved.iter().all(SocketAddr::is_ipv6) {
        return SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), hp.port);
    }
    SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), hp.port)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(v: &str) -> String {
        parse("X", v, 29500).unwrap().to_string()
    }

    fn reason(v: &str) -> String {
        match parse("FERROVIA_RENDEZVOUS", v, 29500) {
            Err(BootstrapError::MalformedVar { name, reason, .. }) => {
                assert_eq!(name, "FERROVIA_RENDEZVOUS");
                reason
            }
            other => panic!("{v:?} was accepted: {other:?}"),
        }
    }

    #[test]
    fn good_addresses_parse() {
        assert_eq!(ok("node01"), "node01:29500");
        assert_eq!(ok(" node01:7000 "), "node01:7000");
        assert_eq!(ok("127.0.0.1:0"), "127.0.0.1:0");
        assert_eq!(ok("[::1]:9000"), "[::1]:9000");
        assert_eq!(ok("[fe80::1]"), "[fe80::1]:29500");
    }

    #[test]
    fn malformed_addresses_are_refused_with_a_reason() {
        assert!(reason("127.0.0.1:notaport").contains("\"notaport\""));
        assert!(reason(":").contains("host is empty"));
        assert!(reason(":29500").contains("host is empty"));
        assert!(reason("").contains("host is empty"));
        assert!(reason("h:70000").contains("0 to 65535"));
        assert!(reason("h:").contains("0 to 65535"));
        assert!(reason("::1").contains("[::1]:29500"));
        assert!(reason("[::1").contains("not closed"));
        assert!(reason("[nothex]:1").contains("IPv6"));
        assert!(reason("a b:1").contains("not a host"));
        assert!(reason("a:b:1").contains("not a host"));
    }

    #[test]
    fn rank_0_listens_on_what_was_configured() {
        let at = |v: &str| listen_addr(&parse("X", v, 1).unwrap()).to_string();
        assert_eq!(at("127.0.0.1:5"), "127.0.0.1:5");
        assert_eq!(at("0.0.0.0:5"), "0.0.0.0:5");
        assert_eq!(at("[::1]:5"), "[::1]:5");
        assert!(at("localhost:5").contains("127.0.0.1:5") || at("localhost:5") == "[::1]:5");
        assert_eq!(at("no-such-host.invalid:5"), "0.0.0.0:5");
    }
}
