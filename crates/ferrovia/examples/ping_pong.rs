//! Ping-pong between two channels of one process: the smallest ferrovia
//! program. Without RDMA hardware: `cargo xtask vm -- cargo run --example
//! ping_pong`.

use std::error::Error;
use std::time::{Duration, Instant};

use ferrovia::{Channel, Gather, ReceiveWorkRequest, RegisterOptions, Scatter, SendWorkRequest};

type Res<T = ()> = Result<T, Box<dyn Error>>;
const ROUNDS: usize = 100;
const WAIT: Duration = Duration::from_secs(10);

fn main() -> Res {
    let mut ping = Channel::builder().build()?;
    let mut pong = Channel::builder().pd(ping.pd()).build()?;
    let (e1, e2) = (ping.endpoint(), pong.endpoint());
    ping.connect(&e2)?;
    pong.connect(&e1)?;

    let reg = |ch: &Channel, bytes: &[u8]| {
        ch.registry()
            .register_buffer(bytes.to_vec(), RegisterOptions::local())
    };
    let (ball, reply) = (reg(&ping, b"ping")?, reg(&pong, b"pong")?);
    let (mut catch, mut back) = (reg(&pong, &[0; 16])?, reg(&ping, &[0; 16])?);
    let start = Instant::now();
    for _ in 0..ROUNDS {
        pong.scope(|p| -> Res {
            let caught = p.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut catch)?))?;
            ping.scope(|s| -> Res {
                let returned = s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut back)?))?;
                s.post_send(SendWorkRequest::new(&[Gather::of(&ball)?])?)?
                    .wait(WAIT)?;
                assert_eq!(
                    caught.wait(WAIT)?.into_received().unwrap_or_default(),
                    b"ping"
                );
                p.post_send(SendWorkRequest::new(&[Gather::of(&reply)?])?)?
                    .wait(WAIT)?;
                assert_eq!(
                    returned.wait(WAIT)?.into_received().unwrap_or_default(),
                    b"pong"
                );
                Ok(())
            })?;
            Ok(())
        })?;
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64;
    println!(
        "ping_pong: {ROUNDS} round trips on {}, {us:.1} µs each, every message verified",
        ping.pd().context().name()
    );
    Ok(())
}
