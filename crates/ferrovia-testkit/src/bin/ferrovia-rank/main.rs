//! `ferrovia-rank`: one rank of a ferrovia job, for the multi-process
//! tests, the demo and the barrier benchmark. Rank, world size and
//! rendezvous come from the launcher's environment (`FERROVIA_*`,
//! torchrun, Slurm, mpirun); `ferrovia-rank --help` lists the commands,
//! the exit statuses and the variables read (see `cli`).
#![forbid(unsafe_code)]

mod abandon;
mod atomics;
mod cli;
mod dead_peer;
mod member;
mod pool;
mod rails;
mod reconnect;
mod stats;

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use ferrovia_channel::{
    ChannelBuilder, Gather, PeerReadWorkRequest, PeerReceiveWorkRequest, PeerSendWorkRequest,
    PeerWriteWorkRequest, ReadWorkRequest, ReceiveWorkRequest, Scatter, SendWorkRequest,
    WriteWorkRequest,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_node::{
    BarrierAlgorithm, BootstrapError, Node, NodeBuilder, NodeError, NodeScope, launch::from_vars,
};

use crate::cli::{Algorithm, Cli, Command};

pub(crate) const SLOT: usize = 64;
const WAIT: Duration = Duration::from_secs(30);

fn pattern(from: usize, to: usize, iter: usize) -> [u8; SLOT] {
    std::array::from_fn(|i| (from * 31 + to * 7 + iter * 13 + i) as u8)
}

fn build(
    algorithm: BarrierAlgorithm,
    timeout: Option<Duration>,
    launch: Option<usize>,
    pool: u32,
) -> Result<Node, NodeError> {
    let info = match from_vars(&|k| std::env::var(k).ok()) {
        Ok(info) => info,
        Err(BootstrapError::MissingVar {
            name: "FERROVIA_RANK",
            ..
        }) if launch.is_some() => return Node::from_env_or_launch(launch.unwrap_or(0)),
        Err(e) => return Err(e.into()),
    };
    let mut b = NodeBuilder::from_launch(&info)
        .barrier_algorithm(algorithm)
        .channel(ChannelBuilder::default().shared_receives(pool));
    if let Some(t) = timeout {
        b = b.bootstrap_timeout(t);
    }
    b.build()
}

/// Every operation with every rank, data verified, barriers between.
pub(crate) fn exchange(node: &mut Node, iters: usize) -> Result<(), NodeError> {
    let (me, n) = (node.rank(), node.world_size());
    let all: Vec<usize> = (0..n).collect();
    let opts = RegisterOptions::local()
        .allow_remote_write()
        .allow_remote_read();
    let inbox = node.registry().alloc(n * SLOT, opts)?;
    let mut outbox = node.registry().alloc(n * SLOT, RegisterOptions::local())?;
    let mut recv = node.registry().alloc(n * SLOT, RegisterOptions::local())?;
    let mut back = node.registry().alloc(n * SLOT, RegisterOptions::local())?;
    let remotes = node.all_gather_remote(inbox.registration().remote()?, WAIT)?;
    let others: Vec<usize> = (0..n).filter(|&p| p != me).collect();
    for it in 0..iters {
        for p in 0..n {
            outbox[p * SLOT..(p + 1) * SLOT].copy_from_slice(&pattern(me, p, it));
        }
        node.scope(|s| {
            let (rbytes, rreg) = recv.split_mut();
            let mut rchunks: Vec<_> = rbytes.chunks_mut(SLOT).map(Some).collect();
            let recvs = s.post_gather_receive(
                others
                    .iter()
                    .map(|&p| {
                        Ok(PeerReceiveWorkRequest::new(
                            p,
                            ReceiveWorkRequest::new(Scatter::new(
                                rreg,
                                rchunks[p].take().unwrap(),
                            )?),
                        ))
                    })
                    .collect::<Result<Vec<_>, NodeError>>()?,
            )?;
            s.barrier(&all, WAIT)?; // every receive is posted
            let gathers: Vec<[Gather<'_>; 1]> = (0..n)
                .map(|p| Ok([Gather::range(&outbox, p * SLOT..(p + 1) * SLOT)?]))
                .collect::<Result<_, NodeError>>()?;
            let sends = s.post_scatter_send(others.iter().map(|&p| {
                PeerSendWorkRequest::new(p, SendWorkRequest::new(&gathers[p]).unwrap())
            }))?;
            let writes = s.post_scatter_write(
                (0..n)
                    .map(|p| {
                        Ok(PeerWriteWorkRequest::new(
                            p,
                            WriteWorkRequest::new(
                                &gathers[p],
                                remotes[p].sub_region((me * SLOT) as u64, SLOT as u64)?,
                            )?,
                        ))
                    })
                    .collect::<Result<Vec<_>, NodeError>>()?,
            )?;
            for h in sends.into_iter().chain(writes) {
                h.wait(WAIT)?;
            }
            for (h, &p) in recvs.into_iter().zip(&others) {
                let got = h.wait(WAIT)?.into_received().unwrap_or_default();
                if got != pattern(p, me, it) {
                    return Err(NodeError::Transport(
                        ferrovia_channel::TransportError::Config(format!(
                            "iteration {it}: send from rank {p} corrupted"
                        )),
                    ));
                }
            }
            s.barrier(&all, WAIT)?; // every write has landed
            let landed = inbox.to_vec();
            for p in 0..n {
                if landed[p * SLOT..(p + 1) * SLOT] != pattern(p, me, it) {
                    return Err(NodeError::Transport(
                        ferrovia_channel::TransportError::Config(format!(
                            "iteration {it}: write from rank {p} corrupted"
                        )),
                    ));
                }
            }
            let (bbytes, breg) = back.split_mut();
            let reads = s.post_gather_read(
                bbytes
                    .chunks_mut(SLOT)
                    .enumerate()
                    .map(|(p, chunk)| {
                        Ok(PeerReadWorkRequest::new(
                            p,
                            ReadWorkRequest::new(
                                Scatter::new(breg, chunk)?,
                                remotes[p].sub_region((me * SLOT) as u64, SLOT as u64)?,
                            )?,
                        ))
                    })
                    .collect::<Result<Vec<_>, NodeError>>()?,
            )?;
            for (p, h) in reads.into_iter().enumerate() {
                let got = h.wait(WAIT)?.into_buffer().unwrap_or_default();
                if got != pattern(me, p, it) {
                    return Err(NodeError::Transport(
                        ferrovia_channel::TransportError::Config(format!(
                            "iteration {it}: read from rank {p} corrupted"
                        )),
                    ));
                }
            }
            // Subsets: even and odd ranks meet separately, twice back to back.
            let half: Vec<usize> = (0..n).filter(|p| p % 2 == me % 2).collect();
            s.barrier(&half, WAIT)?;
            s.barrier(&half, WAIT)?;
            s.barrier(&all, WAIT)?; // nobody rewrites an inbox still being read
            Ok::<_, NodeError>(())
        })?;
    }
    println!(
        "rank {me}: {iters} iterations of send/recv, write, read and barriers with {n} ranks verified (met through {})",
        node.engine()
    );
    Ok(())
}

/// A narrated tour for the README's main job.
fn demo(node: &mut Node) -> Result<(), NodeError> {
    let (me, n) = (node.rank(), node.world_size());
    let all: Vec<usize> = (0..n).collect();
    let say = |what: String| println!("rank {me}: {what}");
    let hint = if node.backend() == ferrovia_node::Backend::Ucx {
        " (no RDMA device here; `cargo xtask demo node-softroce` runs this on soft-RoCE)"
    } else {
        ""
    };
    say(format!(
        "joined a world of {n} ranks, backend {}{hint}",
        node.describe()
    ));
    node.barrier(&all, WAIT)?;
    say("barrier: every rank is connected".into());

    // Ring: send a greeting to the next rank, receive one from the previous.
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let text = format!("hello from rank {me}");
    let greeting = node
        .registry()
        .register_buffer(text.clone().into_bytes(), RegisterOptions::local())?;
    let mut inbox = node.registry().alloc(64, RegisterOptions::local())?;
    let got = node.scope(|s| {
        let r = s.post_receive(PeerReceiveWorkRequest::new(
            prev,
            ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
        ))?;
        s.barrier(&all, WAIT)?; // receives are posted before anyone sends
        let g = [Gather::of(&greeting)?];
        s.post_send(PeerSendWorkRequest::new(next, SendWorkRequest::new(&g)?))?
            .wait(WAIT)?;
        let done = r.wait(WAIT)?;
        Ok::<_, NodeError>(
            String::from_utf8_lossy(done.into_received().unwrap_or_default()).into_owned(),
        )
    })?;
    say(format!(
        "send/recv: sent {text:?} to rank {next}, received {got:?} from rank {prev}"
    ));

    // One-sided: write my rank into slot `me` of every rank's board.
    let opts = RegisterOptions::local()
        .allow_remote_write()
        .allow_remote_read();
    let board = node.registry().alloc(n * 8, opts)?;
    let boards = node.all_gather_remote(board.registration().remote()?, WAIT)?;
    let mine = node.registry().register_buffer(
        (me as u64 + 100).to_le_bytes().to_vec(),
        RegisterOptions::local(),
    )?;
    let mut peek = node.registry().alloc(n * 8, RegisterOptions::local())?;
    node.scope(|s| {
        let g = [Gather::of(&mine)?];
        for (p, remote) in boards.iter().enumerate() {
            s.post_write(PeerWriteWorkRequest::new(
                p,
                WriteWorkRequest::new(&g, remote.sub_region(8 * me as u64, 8)?)?,
            ))?
            .wait(WAIT)?;
        }
        s.barrier(&all, WAIT)?; // every write has landed everywhere
        // Read the next rank's whole board back.
        s.post_read(PeerReadWorkRequest::new(
            next,
            ReadWorkRequest::new(Scatter::of(&mut peek)?, boards[next])?,
        ))?
        .wait(WAIT)?;
        Ok::<_, NodeError>(())
    })?;
    let values = |b: &[u8]| -> Vec<u64> {
        b.chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect()
    };
    let expect: Vec<u64> = (0..n as u64).map(|r| r + 100).collect();
    let board = board.to_vec();
    if values(&board) != expect || values(&peek) != expect {
        return Err(NodeError::Transport(
            ferrovia_channel::TransportError::Config(format!(
                "board {:?} / rank {next}'s board {:?}, expected {expect:?}",
                values(&board),
                values(&peek)
            )),
        ));
    }
    say(format!(
        "RDMA write: every rank wrote its slot of my board: {:?}",
        values(&board)
    ));
    say(format!(
        "RDMA read: read rank {next}'s board back: {:?}",
        values(&peek)
    ));
    node.barrier(&all, WAIT)?;
    say("barrier: done, all data verified".into());
    Ok(())
}

/// Issue 12, part 4: rank 1 registers memory of its own, rank 0 writes
/// it, rank 1 drops the registration, both pass a barrier, and rank 0
/// writes again with the old descriptor. That write must fail with a
/// remote access error, and nothing may land in rank 1's memory. The
/// failed write breaks the connection from rank 0 to rank 1 (as on verbs),
/// so rank 2 relays "rank 0 is done" to rank 1 before it looks; ranks
/// beyond 2 only join the descriptor exchange.
fn stale_write(node: &mut Node) -> Result<(), NodeError> {
    let (me, n) = (node.rank(), node.world_size());
    if n < 3 {
        return Err(NodeError::Transport(
            ferrovia_channel::TransportError::Config(format!(
                "stale-write needs 3 ranks or more, not {n}"
            )),
        ));
    }
    let opts = RegisterOptions::local()
        .allow_remote_write()
        .allow_remote_read();
    let mut exposed = match me {
        1 => Some(node.registry().alloc(SLOT, opts)?),
        _ => None,
    };
    let placeholder = node.registry().alloc(SLOT, opts)?;
    let mine = match &exposed {
        Some(e) => e.registration().remote()?,
        None => placeholder.registration().remote()?,
    };
    let target = node.all_gather_remote(mine, WAIT)?[1];
    let live = node
        .registry()
        .register_buffer(vec![0xee; SLOT], RegisterOptions::local())?;
    let stale = node
        .registry()
        .register_buffer(vec![0x55; SLOT], RegisterOptions::local())?;
    let write = |node: &mut Node, src| {
        node.scope(|s| {
            let g = [Gather::of(src)?];
            s.post_write(PeerWriteWorkRequest::new(
                1,
                WriteWorkRequest::new(&g, target)?,
            ))?
            .wait(WAIT)?;
            Ok::<_, NodeError>(())
        })
        .map_err(NodeError::from)
    };
    // Ranks 0 and 1 as in the issue; rank 2 waits.
    if me < 2 {
        if me == 0 {
            write(node, &live)?;
        }
        node.barrier(&[0, 1], WAIT)?; // the live write landed
    }
    // Rank 1 deregisters: the bytes stay, local, to be looked at.
    let kept = match exposed.take() {
        Some(e) => Some(e.into_local(RegisterOptions::local()).map_err(|e| {
            NodeError::Transport(ferrovia_channel::TransportError::Config(e.to_string()))
        })?),
        None => None,
    };
    if me < 2 {
        node.barrier(&[0, 1], WAIT)?; // the registration is gone
    }
    let mut outcome = Ok(());
    match me {
        0 => {
            outcome = match write(node, &stale) {
                Ok(()) => Err(NodeError::Transport(
                    ferrovia_channel::TransportError::Config(
                        "the write with a deregistered key succeeded".into(),
                    ),
                )),
                Err(NodeError::Transport(ferrovia_channel::TransportError::Completion(c)))
                    if c.status.class() == ferrovia_types::WcClass::RemoteAccess =>
                {
                    println!("rank 0: the stale write was refused: {}", c.status.name());
                    Ok(())
                }
                Err(e) => Err(e),
            };
            node.barrier(&[0, 2], WAIT)?; // rank 0 is done writing
        }
        1 => {
            node.barrier(&[1, 2], WAIT)?;
            let memory = kept.as_ref().map(|k| k.to_vec()).unwrap_or_default();
            let changed = memory.iter().filter(|&&b| b != 0xee).count();
            if changed > 0 {
                return Err(NodeError::Transport(
                    ferrovia_channel::TransportError::Config(format!(
                        "a write landed after the deregistration: {changed} of {SLOT} bytes changed"
                    )),
                ));
            }
            println!("rank 1: nothing landed after the deregistration");
        }
        2 => {
            node.barrier(&[0, 2], WAIT)?;
            node.barrier(&[1, 2], WAIT)?;
        }
        _ => {}
    }
    outcome
}

fn barrier_loop(node: &mut Node, iters: usize, timeout: Duration) -> Result<(), NodeError> {
    let all: Vec<usize> = (0..node.world_size()).collect();
    node.barrier(&all, WAIT)?;
    println!("rank {}: in barrier loop", node.rank());
    for _ in 0..iters {
        node.barrier(&all, timeout)?;
    }
    println!("rank {}: {iters} barriers done", node.rank());
    Ok(())
}

/// Microseconds since the Unix epoch: comparable between the ranks of one
/// machine (the test orders events of different processes by it).
pub(crate) fn wall_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
}

/// Issue 12's case, three ranks. After a first barrier together (every
/// connection in use), rank 2 leaves. Rank 1 learns it is gone (a barrier
/// with it alone fails), so it fails `[0, 1, 2]` at once and tells rank
/// 0, which fails it well within `timeout`. Rank 0 then takes its time
/// (a second), and both meet in `[0, 1]`: rank 1 must not leave it before
/// rank 0 entered it. Each rank
/// prints when it enters and leaves `[0, 1]` (`wall_us`), and what the
/// failed barriers said.
fn barrier_after_failure(node: &mut Node, timeout: Duration) -> Result<(), NodeError> {
    let me = node.rank();
    if node.world_size() != 3 {
        return Err(NodeError::Transport(
            ferrovia_channel::TransportError::Config("barrier-after-failure needs 3 ranks".into()),
        ));
    }
    node.barrier(&[0, 1, 2], WAIT)?;
    if me == 2 {
        println!("rank 2: leaving");
        return Ok(());
    }
    if me == 1 {
        let e = node.barrier(&[1, 2], Duration::from_millis(300));
        println!("rank 1: [1, 2] -> {e:?}");
    }
    let t = Instant::now();
    match node.barrier(&[0, 1, 2], timeout) {
        Ok(()) => {
            return Err(NodeError::Transport(
                ferrovia_channel::TransportError::Config("[0, 1, 2] passed without rank 2".into()),
            ));
        }
        Err(e) => println!(
            "rank {me}: [0, 1, 2] failed in {} ms: {e}",
            t.elapsed().as_millis()
        ),
    }
    if me == 0 {
        // Late to [0, 1], so rank 1 waits there long enough to pass it
        // wrongly if it could.
        std::thread::sleep(Duration::from_secs(1));
    }
    println!("rank {me}: enter [0, 1] at {}", wall_us());
    node.barrier(&[0, 1], WAIT)?;
    println!("rank {me}: left [0, 1] at {}", wall_us());
    Ok(())
}

fn barrier_bench(node: &mut Node, iters: usize) -> Result<(), NodeError> {
    let all: Vec<usize> = (0..node.world_size()).collect();
    let mut times = Vec::with_capacity(iters);
    node.scope(|s| {
        for _ in 0..10 {
            s.barrier(&all, WAIT)?;
        }
        for _ in 0..iters {
            let t = Instant::now();
            s.barrier(&all, WAIT)?;
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok::<_, NodeError>(())
    })?;
    times.sort_by(f64::total_cmp);
    if node.rank() == 0 {
        println!(
            "barrier ranks={} median_us={:.1} p99_us={:.1}",
            node.world_size(),
            times[times.len() / 2],
            times[(times.len() * 99 / 100).min(times.len() - 1)]
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    ferrovia_testkit::init_logs();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 1 } else { 0 });
        }
    };
    // barrier-bench names its algorithm; every other command takes it from
    // FERROVIA_BARRIER.
    let vars = cli::barrier_var().and_then(|a| Ok((a, cli::bootstrap_timeout_var()?)));
    let (named, timeout) = match vars {
        Ok(v) => v,
        Err(e) => {
            eprintln!("ferrovia-rank: {e}");
            return ExitCode::from(1);
        }
    };
    let algorithm = match &cli.command {
        Command::BarrierBench { algo, .. } => *algo,
        _ => named.unwrap_or(Algorithm::Dissemination),
    };
    // The pool commands build their node with a shared receive pool.
    let pool = match &cli.command {
        Command::PoolExchange { depth, .. } | Command::PoolFlood { depth, .. } => *depth,
        Command::PoolTooLong => 4,
        _ => 0,
    };
    let building = Instant::now();
    let mut node = match build(algorithm.into(), timeout, cli.launch, pool) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("ferrovia-rank: bootstrap failed: {e}");
            return ExitCode::from(2);
        }
    };
    let ms = Duration::from_millis;
    let result = match cli.command {
        Command::Demo => demo(&mut node),
        Command::Exchange { iters } => {
            exchange(&mut node, iters).map(|()| stats::print_if_asked(&node))
        }
        Command::BarrierLoop { iters, timeout_ms } => {
            barrier_loop(&mut node, iters, ms(timeout_ms))
        }
        Command::BarrierBench { iters, .. } => barrier_bench(&mut node, iters),
        Command::StaleWrite => stale_write(&mut node),
        Command::BarrierAfterFailure { timeout_ms } => {
            barrier_after_failure(&mut node, ms(timeout_ms))
        }
        Command::BarrierAbandon { timeout_ms } => abandon::run(&mut node, ms(timeout_ms)),
        Command::DeadPeer { no_sends } => dead_peer::run(&mut node, !no_sends),
        Command::Atomics { adds, rounds } => atomics::run(&mut node, adds, rounds),
        Command::PoolExchange { msgs, depth } => pool::exchange(&mut node, depth as usize, msgs),
        Command::PoolFlood { msgs, depth } => pool::flood(&mut node, depth as usize, msgs),
        Command::PoolTooLong => pool::too_long(&mut node),
        Command::Rails {
            fail_rank,
            timeout_ms,
        } => rails::run(
            &mut node,
            rails::Plan {
                fail_rank,
                timeout: ms(timeout_ms),
            },
        ),
        Command::Bootstrap => {
            println!(
                "rank {}: bootstrap {} us through {}, connected at {}",
                node.rank(),
                building.elapsed().as_micros(),
                node.engine(),
                wall_us()
            );
            let all: Vec<usize> = (0..node.world_size()).collect();
            node.barrier(&all, WAIT)
        }
        Command::Member {
            victim,
            replacement,
            timeout_ms,
        } => member::run(
            &mut node,
            member::Plan {
                victim,
                replacement,
                timeout: ms(timeout_ms),
            },
        ),
        Command::StoreLost { timeout_ms } => member::store_lost(&mut node, ms(timeout_ms)),
        Command::Reconnect {
            dead,
            timeout_ms,
            stale,
            cycles,
        } => reconnect::run(
            &mut node,
            reconnect::Plan {
                dead,
                timeout: Duration::from_millis(timeout_ms),
                stale,
                cycles,
            },
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrovia-rank {}: {e}", node.rank());
            ExitCode::from(3)
        }
    }
}
