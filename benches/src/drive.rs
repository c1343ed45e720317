//! One run of the bench: the ceilings, the rounds of the throughput sweep over every backend
//! and the peers, then per backend the registration, notification and telemetry costs, and
//! the scale mode; then the tables, the JSON and the SVG.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::elsewhere::run_elsewhere;
use crate::{
    Args, Backends, CeilingKind, Ceilings, Registration, Res, Run, ceiling, measure, notify,
    overhead, peers, report, scale,
};

pub(crate) fn run(backends: &dyn Backends, args: &mut Args) -> Res<()> {
    if args.backends.is_empty() {
        args.backends = backends.names();
    }
    let ops = args.ops()?;
    let (sweep, reg) = (args.measures("throughput")?, args.measures("registration")?);
    let (notify, telemetry) = (args.measures("notify")?, args.measures("telemetry")?);
    if let Some(bad) = args
        .peers
        .iter()
        .find(|p| *p != "none" && !peers::PEERS.iter().any(|q| q.name == p.as_str()))
    {
        return Err(format!("unknown peer {bad:?} (mooncake, nixl, none)").into());
    }
    let mut run = Run::new(args.region_mib, args.layout, args.rounds, args.slices);
    let mut scaled = Vec::new();
    // The ceilings, measured first (again after the sweep, and probed before each point).
    let region = if sweep { args.region_mib << 20 } else { 0 };
    let mut set = ceiling::WorkingSet::new(region)?;
    if sweep {
        println!("measuring the memory and TCP ceilings");
        run.ceilings = Ceilings::measure(&mut set, ceiling_time(args))?;
    }
    // A backend that cannot run in this process (NIXL beside the system UCX) runs in the
    // binary that can, if there is one; one that cannot run at all is reported and left out.
    let (mut here, mut elsewhere) = (Vec::new(), Vec::new());
    for backend in &args.backends {
        match backends.open(backend, 1, 4096, args.options(backend)?, args.allocate) {
            Ok(t) => here.push((backend.clone(), t.capabilities())),
            Err(e) if is_unsupported(&*e) => match backends.elsewhere(backend) {
                Some(_) => elsewhere.push(backend.clone()),
                None => {
                    println!("{backend}: skipped: {e}");
                    run.skipped.push(format!("{backend}: {e}"));
                }
            },
            Err(e) => return Err(e),
        }
    }
    let rounds = args.rounds.max(1) as usize;
    let per_backend = usize::from(sweep) * ops.len() * args.sizes_kib.len() * rounds
        + usize::from(reg) * REGISTRATION_SIZES.len()
        + (usize::from(notify) + usize::from(telemetry)) * ops.len();
    let bar = ProgressBar::new((here.len() * per_backend) as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    if args.emit_json.is_some() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let peers = sweep && args.peers.iter().any(|p| p != "none");
    // Round after round over every backend and peer, so that a slow minute of the machine
    // falls on one round of each rather than on every round of one. A backend that runs in
    // another binary runs there once a round (one round of its sweep), then once more for
    // what else is measured.
    let one_round = Args {
        rounds: 1,
        measures: vec!["throughput".into()],
        ..args.clone()
    };
    for _ in (0..rounds).filter(|_| sweep) {
        for backend in &elsewhere {
            let other =
                bar.suspend(|| run_elsewhere(backends, &one_round, backend, &mut scaled))?;
            run.merge(other);
        }
        for (backend, _) in &here {
            for &op in &ops {
                for &kib in &args.sizes_kib {
                    bar.set_message(format!("{backend} {op} {kib} KiB"));
                    let point = measure::throughput(
                        backends,
                        args,
                        backend,
                        op,
                        kib << 10,
                        (&mut set, &mut run.ceilings),
                    )?;
                    run.points.push(point);
                    bar.inc(1);
                }
            }
        }
        if peers {
            bar.suspend(|| -> Res<()> {
                let half = Duration::from_secs_f64(args.duration / 2.0);
                let memcpy_1thr = set.gbps(half);
                run.ceilings.probe(CeilingKind::Tcp, &mut set, half / 2)?;
                peers::run(args, memcpy_1thr, &mut run);
                Ok(())
            })?;
        }
    }
    let rest = Args {
        measures: (args.measures.iter())
            .filter(|m| *m != "throughput")
            .cloned()
            .collect(),
        ..args.clone()
    };
    for backend in elsewhere.iter().filter(|_| !rest.measures.is_empty()) {
        let other = bar.suspend(|| run_elsewhere(backends, &rest, backend, &mut scaled))?;
        run.merge(other);
    }
    for (backend, caps) in &here {
        for blocks in REGISTRATION_SIZES.into_iter().filter(|_| reg) {
            bar.set_message(format!("{backend} add_remote_peer, {blocks} blocks"));
            run.registration.push(Registration {
                backend: backend.clone(),
                blocks,
                median_us: measure::registration_us(backends, args, backend, blocks)?,
            });
            bar.inc(1);
        }
        costs(
            backends,
            args,
            backend,
            caps,
            (notify, telemetry),
            &bar,
            &mut run,
        )?;
    }
    bar.finish_and_clear();
    if sweep {
        // Again after the sweep, the better of the two kept: a ceiling measured while the
        // machine was busier than during the points would flatter them.
        let again = Ceilings::measure(&mut set, ceiling_time(args))?;
        run.ceilings.keep_best(&again);
    }
    if args.measures("scale")? {
        let names: Vec<String> = here.iter().map(|(b, _)| b.clone()).collect();
        scaled.extend(scale::run_here(backends, args, &names)?);
    }
    run.keep_median_points();
    run.settle();
    if let Some(path) = &args.emit_json {
        std::fs::write(path, serde_json::to_string(&run)?)?;
        scale::emit_beside(path, &scaled)?;
        return Ok(());
    }
    report::print_tables(&run);
    scale::print_table(&scaled);
    let dir = report::write(&run, &args.results)?;
    scale::write(&scaled, &dir)?;
    println!("\nresults (JSON and SVG plot): {}", dir.display());
    Ok(())
}

/// The notification cost (`notify`) and the telemetry overhead (`telemetry`) of `backend`,
/// for each operation asked for.
fn costs(
    backends: &dyn Backends,
    args: &Args,
    backend: &str,
    caps: &blockwire::Capabilities,
    (notify, telemetry): (bool, bool),
    bar: &ProgressBar,
    run: &mut Run,
) -> Res<()> {
    let ops = args.ops()?;
    for &op in ops.iter().filter(|_| notify) {
        bar.set_message(format!("{backend} {op} notification cost"));
        match notify::skip_reason(caps, op, args) {
            Some(why) => skip(bar, run, format!("{backend} {op} notification cost: {why}")),
            None => run.notify.push(notify::cost(backends, args, backend, op)?),
        }
        bar.inc(1);
    }
    for &op in ops.iter().filter(|_| telemetry) {
        bar.set_message(format!("{backend} {op} telemetry overhead"));
        match measure::skip_reason(caps, op, args) {
            Some(why) => skip(
                bar,
                run,
                format!("{backend} {op} telemetry overhead: {why}"),
            ),
            None => run
                .telemetry
                .push(overhead::cost(backends, args, backend, op)?),
        }
        bar.inc(1);
    }
    Ok(())
}

/// Leaves a measurement out, saying why (now, and in the run's `skipped`).
fn skip(bar: &ProgressBar, run: &mut Run, why: String) {
    bar.println(format!("skipped: {why}"));
    run.skipped.push(why);
}

/// How long each setting of the ceilings is measured: `--duration`, within 0.2 to 1 s
/// (`--quick`: 0.15 s).
fn ceiling_time(args: &Args) -> Duration {
    Duration::from_secs_f64(if args.quick {
        0.15
    } else {
        args.duration.clamp(0.2, 1.0)
    })
}

/// Peer sizes whose registration is timed.
const REGISTRATION_SIZES: [u32; 3] = [1_000, 19_599, 1_000_000];

fn is_unsupported(e: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        e.downcast_ref::<blockwire::Error>(),
        Some(blockwire::Error::Open { source, .. })
            if source.kind() == blockwire::BackendErrorKind::Unsupported
    )
}
