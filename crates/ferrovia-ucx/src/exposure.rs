//! Which networks a UCX context listens on.
//!
//! UCX's tcp transport opens a listening port on every interface that
//! `UCX_NET_DEVICES` allows (all of them by default), and it trusts what
//! arrives there: malformed bytes from any client abort the process (an
//! assertion in its tcp endpoint, still in UCX 1.22). So ferrovia confines
//! UCX to the network its peers need:
//!
//! - peers on this host only: no network at all. Unless `UCX_TLS` is set,
//!   the context uses shared memory and self only, and opens no port;
//!   with a `UCX_TLS` that names tcp, its ports are on loopback only,
//!   where only local users reach them;
//! - peers on other hosts: the tcp transport on the interface that reaches
//!   them only (the host's RDMA device ports stay usable).
//!
//! A `UCX_NET_DEVICES` the user set is left as it is.

use std::net::IpAddr;

use crate::netdev;

/// Where the peers of a UCX context are, which decides where UCX may
/// listen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exposure {
    /// Every peer runs on this host: shared memory and self unless
    /// `UCX_TLS` says otherwise, and then UCX's network ports on loopback
    /// only.
    ThisHost,
    /// Peers reach this host at this address: UCX's tcp transport listens
    /// on that address's interface only (a loopback address means
    /// [`Exposure::ThisHost`], an unspecified one [`Exposure::Unconfined`]).
    Via(IpAddr),
    /// As the `UCX_*` variables say (every interface, by default).
    Unconfined,
}

/// The shared-memory transports of UCX 1.13 and its loopback transport.
pub(crate) const SHARED_MEMORY_TLS: &str = "sm,self";

impl Exposure {
    /// Where a context for connections with `addr` (a listener's address,
    /// or the peer a client connects to, seen from `local`, the address
    /// this host reaches it from) may listen.
    pub fn for_address(local: IpAddr) -> Exposure {
        if local.is_loopback() {
            Exposure::ThisHost
        } else if local.is_unspecified() {
            Exposure::Unconfined
        } else {
            Exposure::Via(local)
        }
    }

    /// Whether the context will run on shared memory and self only (so
    /// peer failures are not detected: UCX 1.13's shared memory has no
    /// peer failure handling).
    pub fn shared_memory_only(self, env: &dyn Fn(&str) -> Option<String>) -> bool {
        matches!(self.normal(), Exposure::ThisHost) && set(env, "UCX_TLS").is_none()
    }

    fn normal(self) -> Exposure {
        match self {
            Exposure::Via(ip) => Exposure::for_address(ip),
            e => e,
        }
    }

    /// The configuration entries (names without `UCX_`) that confine a
    /// context, given the environment `env`.
    pub(crate) fn options(
        self,
        env: &dyn Fn(&str) -> Option<String>,
        interface_of: &dyn Fn(IpAddr) -> Option<String>,
        rdma_ports: &dyn Fn() -> Vec<String>,
    ) -> Vec<(&'static str, String)> {
        let user_tls = set(env, "UCX_TLS").is_some();
        let user_devices = set(env, "UCX_NET_DEVICES").is_some();
        let devices = |first: String| {
            let mut all = vec![first];
            all.extend(rdma_ports());
            ("NET_DEVICES", all.join(","))
        };
        match self.normal() {
            Exposure::Unconfined => Vec::new(),
            Exposure::ThisHost if !user_tls => vec![("TLS", SHARED_MEMORY_TLS.to_owned())],
            Exposure::ThisHost if user_devices => Vec::new(),
            Exposure::ThisHost => vec![devices("lo".to_owned())],
            Exposure::Via(_) if user_devices => Vec::new(),
            Exposure::Via(ip) => match interface_of(ip) {
                Some(name) => vec![devices(name)],
                None => {
                    tracing::warn!(
                        "ucx: no interface holds {ip}; UCX's tcp transport is not confined to one (set UCX_NET_DEVICES)"
                    );
                    Vec::new()
                }
            },
        }
    }

    /// [`Exposure::options`] for this host's environment and devices.
    pub(crate) fn host_options(self) -> Vec<(&'static str, String)> {
        self.options(
            &|k| std::env::var(k).ok(),
            &netdev::interface_of,
            &netdev::rdma_ports,
        )
    }
}

/// A variable set to something.
fn set(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name).filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(e: Exposure, vars: &[(&str, &str)], ports: &[&str]) -> Vec<(&'static str, String)> {
        let env = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        let ports: Vec<String> = ports.iter().map(|p| p.to_string()).collect();
        e.options(
            &env,
            &|ip| (ip == IpAddr::from([10, 0, 0, 5])).then(|| "eth1".to_owned()),
            &|| ports.clone(),
        )
    }

    #[test]
    fn a_one_host_job_uses_shared_memory_unless_told_otherwise() {
        assert_eq!(
            opts(Exposure::ThisHost, &[], &[]),
            [("TLS", "sm,self".to_owned())]
        );
        let loopback = Exposure::Via(IpAddr::from([127, 0, 0, 1]));
        assert_eq!(opts(loopback, &[], &[]), [("TLS", "sm,self".to_owned())]);
        assert!(Exposure::ThisHost.shared_memory_only(&|_| None));
        assert!(!Exposure::ThisHost.shared_memory_only(&|_| Some("tcp".into())));
    }

    #[test]
    fn a_named_transport_on_one_host_listens_on_loopback_only() {
        assert_eq!(
            opts(Exposure::ThisHost, &[("UCX_TLS", "tcp")], &["mlx5_0:1"]),
            [("NET_DEVICES", "lo,mlx5_0:1".to_owned())]
        );
        // Devices the user named are the user's.
        assert!(
            opts(
                Exposure::ThisHost,
                &[("UCX_TLS", "tcp"), ("UCX_NET_DEVICES", "eth0")],
                &[]
            )
            .is_empty()
        );
    }

    #[test]
    fn a_multi_host_job_listens_on_the_interface_toward_its_peers() {
        let via = Exposure::Via(IpAddr::from([10, 0, 0, 5]));
        assert_eq!(opts(via, &[], &[]), [("NET_DEVICES", "eth1".to_owned())]);
        assert_eq!(
            opts(via, &[("UCX_TLS", "tcp,sm")], &["rxe0:1"]),
            [("NET_DEVICES", "eth1,rxe0:1".to_owned())]
        );
        assert!(opts(via, &[("UCX_NET_DEVICES", "all")], &[]).is_empty());
        // An address no interface holds: left unconfined (and logged).
        assert!(opts(Exposure::Via(IpAddr::from([10, 9, 9, 9])), &[], &[]).is_empty());
        assert!(opts(Exposure::Unconfined, &[], &[]).is_empty());
        assert_eq!(
            Exposure::for_address(IpAddr::from([0, 0, 0, 0])),
            Exposure::Unconfined
        );
    }
}
