//! What each guest of a run looks like: its network, its addresses and the
//! extra environment its command gets. One guest normally; two joined by a
//! virtual wire for real two-host RoCE tests.

use std::path::PathBuf;

/// The soft-RoCE device every guest gets.
pub(crate) const RXE: &str = "rxe0";

/// How a guest's rxe device reaches the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GuestNet {
    /// No NIC at all: rxe on a dummy interface (loopback traffic only).
    /// rdma_cm cannot resolve routes over `lo`, hence a dummy.
    Dummy { netdev: String, cidr: String },
    /// A virtio-net NIC joined to the peer VM by a qemu `dgram` netdev over
    /// two unix sockets (no host networking involved).
    Wire {
        netdev: String,
        cidr: String,
        mac: String,
        local_socket: PathBuf,
        remote_socket: PathBuf,
    },
}

impl GuestNet {
    pub(crate) fn netdev(&self) -> &str {
        match self {
            GuestNet::Dummy { netdev, .. } | GuestNet::Wire { netdev, .. } => netdev,
        }
    }

    pub(crate) fn cidr(&self) -> &str {
        match self {
            GuestNet::Dummy { cidr, .. } | GuestNet::Wire { cidr, .. } => cidr,
        }
    }
}

/// One guest of a run.
#[derive(Debug, Clone)]
pub(crate) struct Guest {
    /// 0-based; printed as `host N` when there are several.
    pub(crate) index: usize,
    pub(crate) hostname: String,
    pub(crate) net: GuestNet,
    /// Variables added to the caller's environment for the guest command.
    pub(crate) env: Vec<(String, String)>,
}

/// The guests of a run with `hosts` VMs; `socket_dir(i)` is where guest `i`
/// keeps its end of the wire.
pub(crate) fn plan(hosts: usize, socket_dir: impl Fn(usize) -> PathBuf) -> Vec<Guest> {
    let device = ("FERROVIA_DEVICE".to_string(), RXE.to_string());
    if hosts <= 1 {
        return vec![Guest {
            index: 0,
            hostname: "ferrovia-vm".into(),
            net: GuestNet::Dummy {
                netdev: "rxenet0".into(),
                cidr: "192.168.77.1/24".into(),
            },
            env: vec![device],
        }];
    }
    let socket = |i: usize| socket_dir(i).join("wire.sock");
    (0..2)
        .map(|i| {
            let peer = 1 - i;
            let env = vec![
                device.clone(),
                ("FERROVIA_HOST_INDEX".into(), i.to_string()),
                (
                    "FERROVIA_PEER_IP".into(),
                    format!("192.168.78.{}", peer + 1),
                ),
            ];
            Guest {
                index: i,
                hostname: format!("ferrovia-vm{i}"),
                net: GuestNet::Wire {
                    netdev: "eth0".into(),
                    cidr: format!("192.168.78.{}/24", i + 1),
                    mac: format!("52:54:00:00:78:{:02x}", i + 1),
                    local_socket: socket(i),
                    remote_socket: socket(peer),
                },
                env,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_hosts_point_at_each_other() {
        let guests = plan(2, |i| PathBuf::from(format!("/r/{i}")));
        let GuestNet::Wire {
            local_socket,
            remote_socket,
            ..
        } = &guests[0].net
        else {
            panic!("no wire")
        };
        assert_eq!(
            (local_socket.to_str(), remote_socket.to_str()),
            (Some("/r/0/wire.sock"), Some("/r/1/wire.sock"))
        );
        assert_eq!(guests[1].net.cidr(), "192.168.78.2/24");
        assert!(
            guests[0]
                .env
                .contains(&("FERROVIA_PEER_IP".into(), "192.168.78.2".into()))
        );
        assert!(
            guests[1]
                .env
                .contains(&("FERROVIA_HOST_INDEX".into(), "1".into()))
        );
    }

    #[test]
    fn one_host_uses_a_dummy() {
        let guests = plan(1, |_| PathBuf::new());
        assert_eq!(guests.len(), 1);
        assert_eq!(guests[0].net.cidr(), "192.168.77.1/24");
    }
}
