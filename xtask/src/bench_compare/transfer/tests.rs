use super::*;
use crate::bench_compare::batch::Numbers;

fn ok(t: Transport, rails: &str, entries: usize, size: usize, rep: usize, mb: f64) -> Record {
    Record {
        transport: t,
        rails: rails.into(),
        entries,
        size,
        rep,
        outcome: Ok(Numbers {
            mb_per_s: mb,
            entries_per_s: mb * 10.0,
            submit_ns: 25.0,
        }),
    }
}

fn put_bw(t: Transport, value: f64) -> parse::Record {
    parse::Record {
        transport: t,
        test: "write_bw".into(),
        size: 4096,
        qps: 1,
        tool: Tool::Reference,
        rep: 1,
        outcome: Outcome::Measured { value, secs: 1.0 },
    }
}

fn records() -> Vec<Record> {
    let v = Transport::Verbs;
    let mut r = vec![
        ok(Transport::UcxTcp, "1", 10_000, 4096, 1, 600.0),
        ok(Transport::UcxTcp, "1", 10_000, 4096, 2, 640.0),
        ok(Transport::UcxTcp, "1", 10_000, 4096, 3, 700.0),
        ok(Transport::UcxTcp, "2", 10_000, 4096, 1, 800.0),
        ok(v, "rxe0", 200, 1 << 20, 1, 50.0),
        ok(v, "rxe0,rxe1", 200, 1 << 20, 1, 60.0),
    ];
    r.push(Record {
        outcome: Err("the ferrovia-perf client timed out after 180 s".into()),
        ..ok(v, "rxe0,rxe1", 10_000, 65536, 1, 0.0)
    });
    r
}

#[test]
fn the_batch_table_has_medians_gaps_and_rail_ratios() {
    let text = section(&records(), &[], &[], "rxe0");
    assert!(
        text.contains("| UCX tcp | 1 | 10,000 x 4 KiB | 640 | 6400 | 25.0 | 3/3 |"),
        "{text}"
    );
    assert!(
        text.contains("| UCX tcp | 2 | 1,000 x 1 MiB | — | — | — | 0/0 |"),
        "{text}"
    );
    assert!(
        text.contains("| rxe0 | rxe0,rxe1 | 10,000 x 64 KiB | — | — | — | 0/1 |"),
        "{text}"
    );
    assert!(
        !text.contains("| UCX sm,self | 1 | 10,000 x 4 KiB"),
        "no sm records, no sm batch rows: {text}"
    );
    assert!(
        text.contains("- rxe0 `--rails rxe0,rxe1` / `--rails rxe0`: 10,000 x 4 KiB —,"),
        "{text}"
    );
    assert!(text.contains("200 x 1 MiB **1.20**\n"), "{text}");
    assert!(text.contains("10,000 x 4 KiB 1.25,"), "{text}");
    assert!(
        text.contains(
            "- rxe0 batch_bw --rails rxe0,rxe1: the ferrovia-perf client timed out after 180 s \
             (10,000 x 64 KiB run 1)"
        ),
        "{text}"
    );
    assert!(
        text.contains("timed batches (30, 2, 20, 2 for the four shapes on the host, 2, 1, 3, 1 on"),
        "{text}"
    );
}

#[test]
fn mooncake_sits_beside_one_rail_and_says_why_when_absent() {
    let tcp = Anchor::from_text(
        r#"{"te_bench": 1, "protocol": "tcp", "kind": "batch", "mode": "async", "entries": 10000, "size": 4096, "rep": 1, "ok": true, "secs": 0.3, "submit_us_per_entry": 1.5, "mb_per_s": 160.0, "entries_per_s": 40000.0}
{"te_bench": 1, "protocol": "tcp", "kind": "batch", "mode": "async", "entries": 1000, "size": 1048576, "rep": 1, "ok": false, "reason": "the async batch returned -1"}"#,
        None,
    );
    let rdma = Anchor::skipped("FERROVIA_MOONCAKE=skip");
    let anchors = [
        (Transport::UcxTcp, "Mooncake tcp", &tcp),
        (Transport::Verbs, "Mooncake rdma rxe0", &rdma),
    ];
    let text = section(&records(), &[], &anchors, "rxe0");
    assert!(
        text.contains(
            "| UCX tcp (1) / Mooncake tcp | 10,000 x 4 KiB | 640 | 160 | 4.00 | 25.0 | 1.50 | 3+1 |"
        ),
        "{text}"
    );
    assert!(
        text.contains("| UCX tcp (1) / Mooncake tcp | 1,000 x 1 MiB | — | — | — | — | — | 0+0 |"),
        "{text}"
    );
    assert!(
        text.contains(
            "| rxe0 (rxe0) / Mooncake rdma rxe0 | 200 x 1 MiB | 50.0 | — | — | 25.0 | — | 1+0 |"
        ),
        "{text}"
    );
    assert!(
        text.contains("- Mooncake rdma rxe0: not measured: FERROVIA_MOONCAKE=skip\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "- Mooncake tcp 1,000 x 1 MiB: 1 of 1 run(s) gave nothing: the async batch returned -1"
        ),
        "{text}"
    );
}

#[test]
fn the_ucx_goal_is_a_ratio_to_ucx_perftest() {
    let pairs = [
        put_bw(Transport::UcxTcp, 800.0),
        put_bw(Transport::UcxTcp, 700.0),
        put_bw(Transport::UcxTcp, 900.0),
        parse::Record {
            tool: Tool::Ferrovia,
            ..put_bw(Transport::UcxTcp, 1.0)
        },
    ];
    let text = section(&records(), &pairs, &[], "rxe0");
    assert!(
        text.contains("| UCX tcp | 1 | 640 | 800 | 0.80 | no |"),
        "{text}"
    );
    assert!(
        text.contains("| UCX tcp | 2 | 800 | 800 | 1.00 | yes |"),
        "{text}"
    );
    assert!(
        text.contains("| UCX sm,self | 1 | — | — | — | — |"),
        "{text}"
    );
}

#[test]
fn notes_name_no_path_of_this_machine() {
    assert_eq!(
        scrub(
            "- te_bench.py: /w/s/benches/x.py in /root/.cache/v and /tmp/te_bench-1/log",
            "/w/s",
            "/root"
        ),
        "- te_bench.py: ./benches/x.py in ~/.cache/v and TMPDIR/te_bench-1/log"
    );
    assert_eq!(scrub("/a b", "", "/"), "/a b");
}
