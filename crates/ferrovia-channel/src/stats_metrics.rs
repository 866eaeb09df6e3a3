//! Feature `metrics`: a [`ChannelStats`] snapshot published through the
//! `metrics` facade, for whatever recorder the program installed (a
//! Prometheus exporter, say). Counters are set to their totals
//! (`absolute`), so publishing again and again is idempotent.

use std::sync::Once;

use metrics::{Label, Unit, counter, describe_counter, describe_gauge, gauge};

use crate::stats::ChannelStats;

/// The latency quantiles published as gauges.
const QUANTILES: [(f64, &str); 4] = [(0.5, "0.5"), (0.9, "0.9"), (0.99, "0.99"), (1.0, "1")];

fn describe() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        describe_counter!(
            "ferrovia_operations_total",
            "Requests posted, by peer and kind"
        );
        describe_counter!(
            "ferrovia_bytes_total",
            Unit::Bytes,
            "Bytes by peer and kind: gathered by sends and writes, asked by reads, received"
        );
        describe_counter!(
            "ferrovia_completions_total",
            "Completions reported, by peer and status"
        );
        describe_counter!("ferrovia_flushes_total", "Connections flushed, by peer");
        describe_counter!("ferrovia_reconnects_total", "Connections renewed, by peer");
        describe_counter!(
            "ferrovia_revocations_total",
            "Registrations revoked that the peer had fetched a key of"
        );
        describe_counter!(
            "ferrovia_pool_receives_total",
            "Receives posted to the shared pool"
        );
        describe_gauge!(
            "ferrovia_outstanding_requests",
            "Requests posted and not yet reported, by peer"
        );
        describe_gauge!(
            "ferrovia_latency_seconds",
            Unit::Seconds,
            "Latency of sampled signalled requests (1 in 64), by peer and quantile"
        );
        describe_counter!(
            "ferrovia_latency_samples_total",
            "Signalled requests timed, by peer"
        );
    });
}

impl ChannelStats {
    /// Publishes this snapshot through the `metrics` facade, each series
    /// labelled with `labels` (a node's `rank`, a transfer engine's
    /// `rail`) and `peer`:
    ///
    /// | name | kind | more labels |
    /// |---|---|---|
    /// | `ferrovia_operations_total` | counter | `kind` (send, write, read, atomic, receive) |
    /// | `ferrovia_bytes_total` | counter | `kind` |
    /// | `ferrovia_completions_total` | counter | `status` (`IBV_WC_SUCCESS`, ...) |
    /// | `ferrovia_flushes_total`, `ferrovia_reconnects_total`, `ferrovia_revocations_total` | counter | |
    /// | `ferrovia_outstanding_requests` | gauge | |
    /// | `ferrovia_latency_seconds` | gauge | `quantile` (0.5, 0.9, 0.99, 1) |
    /// | `ferrovia_latency_samples_total` | counter | |
    /// | `ferrovia_pool_receives_total` | counter | (no `peer`) |
    ///
    /// Counters are set to the snapshot's totals, so call it whenever the
    /// recorder should see fresh numbers. Without a recorder it does
    /// nothing.
    pub fn publish(&self, labels: &[(&'static str, String)]) {
        describe();
        let base: Vec<Label> = labels
            .iter()
            .map(|(k, v)| Label::new(*k, v.clone()))
            .collect();
        let with = |more: &[(&'static str, String)]| -> Vec<Label> {
            let mut l = base.clone();
            l.extend(more.iter().map(|(k, v)| Label::new(*k, v.clone())));
            l
        };
        for p in &self.peers {
            let peer = ("peer", p.peer.to_string());
            for ((kind, ops), (_, bytes)) in p.ops.by_kind().into_iter().zip(p.bytes.by_kind()) {
                let l = with(&[peer.clone(), ("kind", kind.to_owned())]);
                counter!("ferrovia_operations_total", l.clone()).absolute(ops);
                counter!("ferrovia_bytes_total", l).absolute(bytes);
            }
            for (status, n) in &p.completions {
                let l = with(&[peer.clone(), ("status", status.name().to_owned())]);
                counter!("ferrovia_completions_total", l).absolute(*n);
            }
            let l = with(std::slice::from_ref(&peer));
            counter!("ferrovia_flushes_total", l.clone()).absolute(p.flushes);
            counter!("ferrovia_reconnects_total", l.clone()).absolute(p.reconnects);
            counter!("ferrovia_revocations_total", l.clone()).absolute(p.revocations);
            gauge!("ferrovia_outstanding_requests", l.clone()).set(p.outstanding as f64);
            counter!("ferrovia_latency_samples_total", l).absolute(p.latency.samples());
            for (q, name) in QUANTILES {
                if let Some(d) = p.latency.quantile(q) {
                    let l = with(&[peer.clone(), ("quantile", name.to_owned())]);
                    gauge!("ferrovia_latency_seconds", l).set(d.as_secs_f64());
                }
            }
        }
        counter!("ferrovia_pool_receives_total", base).absolute(self.pool_receives);
    }
}
