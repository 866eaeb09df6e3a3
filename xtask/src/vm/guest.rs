//! What each guest of a run looks like: its rails (one soft-RoCE device per
//! network link), their addresses and the extra environment its command
//! gets. One guest normally; two joined by virtual wires for real two-host
//! RoCE tests.

use std::path::PathBuf;

/// The soft-RoCE devices every guest gets, one per rail. Rail 0 is the
/// device everything uses by default (`FERROVIA_DEVICE`); rail 1 is there
/// for multi-rail transfers, which need several devices per host.
pub(crate) const RXE: [&str; 2] = ["rxe0", "rxe1"];

/// How a rail's netdev reaches the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Link {
    /// No NIC at all: a dummy interface (loopback traffic only). rdma_cm
    /// cannot resolve routes over `lo`, hence a dummy.
    Dummy,
    /// A virtio-net NIC joined to the peer VM's NIC of the same rail by a
    /// qemu `dgram` netdev over two unix sockets (no host networking).
    Wire(Wire),
}

/// One end of a virtual wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wire {
    /// The NIC's MAC; stage 2 checks that the netdev it configures has it.
    pub(crate) mac: String,
    pub(crate) local_socket: PathBuf,
    pub(crate) remote_socket: PathBuf,
}

/// One soft-RoCE device on its own netdev and IPv4 subnet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rail {
    pub(crate) rxe: &'static str,
    pub(crate) netdev: String,
    pub(crate) cidr: String,
    pub(crate) link: Link,
}

impl Rail {
    /// The address without its prefix length.
    pub(crate) fn ip(&self) -> &str {
        self.cidr.split('/').next().unwrap_or(&self.cidr)
    }
}

/// One guest of a run.
#[derive(Debug, Clone)]
pub(crate) struct Guest {
    /// 0-based; printed as `host N` when there are several.
    pub(crate) index: usize,
    pub(crate) hostname: String,
    /// In device order: `rails[r].rxe` is `RXE[r]`.
    pub(crate) rails: Vec<Rail>,
    /// Variables added to the caller's environment for the guest command.
    pub(crate) env: Vec<(String, String)>,
}

impl Guest {
    /// The ends of wires this guest listens on.
    pub(crate) fn wires(&self) -> impl Iterator<Item = &Wire> {
        self.rails.iter().filter_map(|rail| match &rail.link {
            Link::Wire(wire) => Some(wire),
            Link::Dummy => None,
        })
    }
}

/// The third octet of rail `r`'s 192.168.x.0/24: 77 (one host) or 78 (the
/// wire between two) for rail 0, ten more per rail after it, so that no two
/// rails share a subnet (the kernel routes by subnet, and rxe follows).
fn subnet(r: usize, wired: bool) -> usize {
    77 + usize::from(wired) + 10 * r
}

/// `SOFTROCE_IP` for rail 0, `SOFTROCE_IP1` for rail 1, ...
fn per_rail(name: &str, r: usize) -> String {
    if r == 0 {
        name.to_string()
    } else {
        format!("{name}{r}")
    }
}

/// What the command learns about the rails: `SOFTROCE_DEV`,
/// `SOFTROCE_NETDEV`, `SOFTROCE_IP` for rail 0 (as before there was a
/// second), the same with suffix 1 for rail 1.
fn rail_env(rails: &[Rail]) -> Vec<(String, String)> {
    let mut env = vec![
        ("SOFTROCE_VM".to_string(), "1".to_string()),
        ("FERROVIA_DEVICE".to_string(), RXE[0].to_string()),
    ];
    for (r, rail) in rails.iter().enumerate() {
        env.push((per_rail("SOFTROCE_DEV", r), rail.rxe.to_string()));
        env.push((per_rail("SOFTROCE_NETDEV", r), rail.netdev.clone()));
        env.push((per_rail("SOFTROCE_IP", r), rail.ip().to_string()));
    }
    env
}

/// The guests of a run with `hosts` VMs; `socket_dir(i)` is where guest `i`
/// keeps its ends of the wires.
pub(crate) fn plan(hosts: usize, socket_dir: impl Fn(usize) -> PathBuf) -> Vec<Guest> {
    if hosts <= 1 {
        let rails: Vec<Rail> = (0..RXE.len())
            .map(|r| Rail {
                rxe: RXE[r],
                netdev: format!("rxenet{r}"),
                cidr: format!("192.168.{}.1/24", subnet(r, false)),
                link: Link::Dummy,
            })
            .collect();
        return vec![Guest {
            index: 0,
            hostname: "ferrovia-vm".into(),
            env: rail_env(&rails),
            rails,
        }];
    }
    // Rail 0 keeps the socket name it had before there was a second rail.
    let socket = |i: usize, r: usize| socket_dir(i).join(format!("{}.sock", per_rail("wire", r)));
    (0..2)
        .map(|i| {
            let peer = 1 - i;
            let rails: Vec<Rail> = (0..RXE.len())
                .map(|r| {
                    let net = subnet(r, true);
                    Rail {
                        rxe: RXE[r],
                        netdev: format!("eth{r}"),
                        cidr: format!("192.168.{net}.{}/24", i + 1),
                        link: Link::Wire(Wire {
                            mac: format!("52:54:00:00:{net}:{:02x}", i + 1),
                            local_socket: socket(i, r),
                            remote_socket: socket(peer, r),
                        }),
                    }
                })
                .collect();
            let mut env = rail_env(&rails);
            env.push(("FERROVIA_HOST_INDEX".into(), i.to_string()));
            for r in 0..rails.len() {
                env.push((
                    per_rail("FERROVIA_PEER_IP", r),
                    format!("192.168.{}.{}", subnet(r, true), peer + 1),
                ));
            }
            Guest {
                index: i,
                hostname: format!("ferrovia-vm{i}"),
                rails,
                env,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(guest: &Guest, name: &str, value: &str) -> bool {
        guest.env.contains(&(name.into(), value.into()))
    }

    #[test]
    fn two_hosts_point_at_each_other_on_every_rail() {
        let guests = plan(2, |i| PathBuf::from(format!("/r/{i}")));
        let ends: Vec<(&str, &str, &str)> = guests[0]
            .wires()
            .map(|w| {
                (
                    w.mac.as_str(),
                    w.local_socket.to_str().unwrap(),
                    w.remote_socket.to_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            ends,
            [
                ("52:54:00:00:78:01", "/r/0/wire.sock", "/r/1/wire.sock"),
                ("52:54:00:00:88:01", "/r/0/wire1.sock", "/r/1/wire1.sock"),
            ]
        );
        let rails: Vec<(&str, &str, &str)> = guests[1]
            .rails
            .iter()
            .map(|r| (r.rxe, r.netdev.as_str(), r.cidr.as_str()))
            .collect();
        assert_eq!(
            rails,
            [
                ("rxe0", "eth0", "192.168.78.2/24"),
                ("rxe1", "eth1", "192.168.88.2/24")
            ]
        );
        assert!(has(&guests[0], "FERROVIA_PEER_IP", "192.168.78.2"));
        assert!(has(&guests[0], "FERROVIA_PEER_IP1", "192.168.88.2"));
        assert!(has(&guests[1], "FERROVIA_HOST_INDEX", "1"));
        assert!(has(&guests[1], "SOFTROCE_IP1", "192.168.88.2"));
        assert!(has(&guests[1], "FERROVIA_DEVICE", "rxe0"));
    }

    #[test]
    fn one_host_has_a_dummy_per_rail_and_rxe0_by_default() {
        let guests = plan(1, |_| PathBuf::new());
        assert_eq!(guests.len(), 1);
        let g = &guests[0];
        assert_eq!(g.wires().count(), 0);
        assert_eq!(g.rails[0].cidr, "192.168.77.1/24");
        assert_eq!(g.rails[1].cidr, "192.168.87.1/24");
        for (name, value) in [
            ("FERROVIA_DEVICE", "rxe0"),
            ("SOFTROCE_DEV", "rxe0"),
            ("SOFTROCE_NETDEV", "rxenet0"),
            ("SOFTROCE_IP", "192.168.77.1"),
            ("SOFTROCE_DEV1", "rxe1"),
            ("SOFTROCE_NETDEV1", "rxenet1"),
            ("SOFTROCE_IP1", "192.168.87.1"),
        ] {
            assert!(has(g, name, value), "{name}={value} in {:?}", g.env);
        }
    }
}
