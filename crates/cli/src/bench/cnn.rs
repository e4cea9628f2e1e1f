//! `strata bench cnn`: the convolutional encoders' forward and forward + backward
//! passes on uint8 image batches, per thread count, against PyTorch's on the same shapes in
//! the same run (when the Python in `STRATA_PYTHON` has torch), and the memory of one batch
//! of observations kept as bytes against floats. The two sides take turns, round after
//! round, and the speed ratio is taken within each round: a shared machine's speed drifts
//! more between minutes than between neighbouring seconds.

use std::process::Stdio;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use strata_env::gym::default_python;
use strata_nn::{Cnn, CnnArch, CnnCache, ConvPrecision, ImageShape, Pixels, SampleRng};

use crate::bench::ledger::median;

/// PyTorch's side, fed to `python -`.
const TORCH_PROGRAM: &str = include_str!("../../python/cnn_torch_bench.py");

/// The section's figures.
#[derive(Serialize, Default, Debug)]
pub struct CnnReport {
    /// One row per round, encoder, thread count and runner.
    pub rows: Vec<CnnRow>,
    /// Strata's speed over PyTorch's (training images per second), per encoder and thread
    /// count: the median and range of the rounds' ratios.
    pub ratios: Vec<CnnRatio>,
    /// Why PyTorch's rows are missing, when they are.
    pub torch_missing: Option<String>,
    /// The kernel the `strata bf16` rows ran on (the AMX tiles, `vdpbf16ps`, or float32
    /// `gemm` on the rounded operands).
    pub bf16_kernel: String,
}

/// Strata's training speed over PyTorch's for one encoder, precision and thread count.
#[derive(Serialize, Debug)]
pub struct CnnRatio {
    pub arch: String,
    /// `strata` (float32) or `strata bf16` (`network.conv_precision = "bf16"`).
    pub runner: String,
    pub threads: usize,
    /// Median over the rounds of PyTorch's forward+backward time over Strata's.
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// The same for the forward pass alone.
    pub forward_median: f64,
}

/// One encoder on one batch, in one round.
#[derive(Serialize, Debug)]
pub struct CnnRow {
    /// Which round of the alternation (0-based).
    pub round: usize,
    /// `nature_cnn` or `minatar_cnn`.
    pub arch: String,
    /// `strata`, `strata bf16` (bfloat16 products) or `pytorch`.
    pub runner: String,
    /// Image shape, `[height, width, channels]`.
    pub shape: [usize; 3],
    pub batch: usize,
    pub threads: usize,
    /// Median forward pass of the batch, milliseconds.
    pub forward_ms: f64,
    /// Median forward + backward (parameter gradients), milliseconds.
    pub train_ms: f64,
    /// Training images per second (`batch / train_ms`).
    pub train_images_per_sec: f64,
    /// The batch's observations as bytes and as floats, in bytes.
    pub batch_bytes_u8: usize,
    pub batch_bytes_f32: usize,
    /// What the encoder keeps for the backward pass of one batch, in bytes (Strata only).
    pub working_bytes: Option<usize>,
}

/// What the PyTorch program prints.
#[derive(Deserialize)]
struct TorchRows {
    rows: Vec<TorchRow>,
}

#[derive(Deserialize)]
struct TorchRow {
    arch: String,
    threads: usize,
    forward_ms: f64,
    train_ms: f64,
}

struct Case {
    arch: CnnArch,
    shape: ImageShape,
    batch: usize,
}

fn cases() -> [Case; 2] {
    let shape = |height, width, channels| ImageShape {
        height,
        width,
        channels,
    };
    [
        // CleanRL's ppo_atari minibatch: 8 envs x 128 steps in 4 minibatches.
        Case {
            arch: CnnArch::NatureCnn,
            shape: shape(84, 84, 4),
            batch: 256,
        },
        Case {
            arch: CnnArch::MinatarCnn,
            shape: shape(10, 10, 4),
            batch: 256,
        },
    ]
}

/// The median time of `reps` calls of `f` after one warm-up (buffers grow once), in ms.
fn median_ms(mut f: impl FnMut(), reps: usize) -> f64 {
    f();
    median(
        (0..reps)
            .map(|_| {
                let t0 = Instant::now();
                f();
                t0.elapsed().as_secs_f64() * 1e3
            })
            .collect(),
    )
}

/// A case's encoder, weights and pixels, made once: NatureCNN's orthogonal initialisation
/// takes longer than all its timed passes.
struct Prepared {
    case: Case,
    cnn: Cnn,
    params: Vec<f32>,
    pixels: Vec<u8>,
}

fn prepare(case: Case) -> Result<Prepared> {
    let cnn = Cnn::new(case.arch, case.shape)?;
    let mut rng = SampleRng::seed_from_u64(0);
    let params = cnn.init_orthogonal(2f32.sqrt(), &mut rng);
    let pixels: Vec<u8> = (0..case.batch * case.shape.len())
        .map(|_| rng.random())
        .collect();
    Ok(Prepared {
        case,
        cnn,
        params,
        pixels,
    })
}

/// Strata's runners: float32, then bfloat16 products.
const PRECISIONS: [(ConvPrecision, &str); 2] = [
    (ConvPrecision::F32, "strata"),
    (ConvPrecision::Bf16, "strata bf16"),
];

fn strata_row(
    p: &Prepared,
    (precision, runner): (ConvPrecision, &str),
    threads: usize,
    reps: usize,
    round: usize,
) -> Result<CnnRow> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let case = &p.case;
    let cnn = &p.cnn.clone().with_precision(precision);
    let ones = vec![1.0; case.batch * cnn.features()];
    let mut grads = vec![0.0; cnn.num_params()];
    let mut cache = CnnCache::default();
    let pixels = Pixels::U8(&p.pixels);
    let (forward_ms, train_ms) = pool.install(|| {
        let forward = median_ms(
            || {
                cnn.forward(&p.params, pixels, case.batch, &mut cache);
            },
            reps,
        );
        let train = median_ms(
            || {
                grads.fill(0.0);
                cnn.forward(&p.params, pixels, case.batch, &mut cache);
                cnn.backward(&p.params, &mut cache, &ones, &mut grads);
            },
            reps,
        );
        (forward, train)
    });
    let mut r = row(case, runner, threads, forward_ms, train_ms, round);
    r.working_bytes = Some(cache.bytes());
    Ok(r)
}

fn row(
    case: &Case,
    runner: &str,
    threads: usize,
    forward_ms: f64,
    train_ms: f64,
    round: usize,
) -> CnnRow {
    let s = case.shape;
    CnnRow {
        round,
        arch: case.arch.name().into(),
        runner: runner.into(),
        shape: [s.height, s.width, s.channels],
        batch: case.batch,
        threads,
        forward_ms,
        train_ms,
        train_images_per_sec: case.batch as f64 / (train_ms * 1e-3),
        batch_bytes_u8: case.batch * s.len(),
        batch_bytes_f32: case.batch * s.len() * 4,
        working_bytes: None,
    }
}

fn torch_rows(threads: &[usize], reps: usize, round: usize) -> Result<Vec<CnnRow>> {
    let python = default_python();
    let spec: Vec<serde_json::Value> = cases()
        .iter()
        .flat_map(|case| {
            threads.iter().map(move |&t| {
                let convs: Vec<[usize; 3]> = case
                    .arch
                    .convs()
                    .iter()
                    .map(|c| [c.out_channels, c.kernel, c.stride])
                    .collect();
                serde_json::json!({
                    "arch": case.arch.name(),
                    "convs": convs,
                    "features": case.arch.features(),
                    "shape": [case.shape.height, case.shape.width, case.shape.channels],
                    "batch": case.batch,
                    "threads": t,
                    "reps": reps,
                })
            })
        })
        .collect();
    let args = [serde_json::to_string(&spec)?];
    let out = crate::bench::python_program::run_python_program(
        &python,
        TORCH_PROGRAM,
        &args,
        Stdio::piped(),
    )?;
    if !out.status.success() {
        bail!(
            "`{}` could not run the PyTorch side (needs torch; set STRATA_PYTHON): {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let parsed: TorchRows = serde_json::from_str(text.trim())
        .with_context(|| format!("unreadable PyTorch result: {text}"))?;
    Ok(parsed
        .rows
        .into_iter()
        .filter_map(|r| {
            let case = cases().into_iter().find(|c| c.arch.name() == r.arch)?;
            Some(row(
                &case,
                "pytorch",
                r.threads,
                r.forward_ms,
                r.train_ms,
                round,
            ))
        })
        .collect())
}

/// Runs the section and prints its table.
pub fn run(quick: bool) -> Result<CnnReport> {
    let (reps, rounds) = if quick { (5, 1) } else { (20, 3) };
    let threads = [1, 2];
    let prepared = cases()
        .into_iter()
        .map(prepare)
        .collect::<Result<Vec<_>>>()?;
    let mut report = CnnReport {
        bf16_kernel: strata_nn::bf16_kernel().describe().to_string(),
        ..CnnReport::default()
    };
    for round in 0..rounds {
        for p in &prepared {
            for &t in &threads {
                for precision in PRECISIONS {
                    report.rows.push(strata_row(p, precision, t, reps, round)?);
                }
            }
        }
        if report.torch_missing.is_none() {
            match torch_rows(&threads, reps, round) {
                Ok(rows) => report.rows.extend(rows),
                Err(e) => report.torch_missing = Some(format!("{e:#}")),
            }
        }
    }
    report.ratios = ratios(&report.rows);
    print(&report);
    Ok(report)
}

/// Per encoder and thread count, the rounds' PyTorch-over-Strata time ratios.
fn ratios(rows: &[CnnRow]) -> Vec<CnnRatio> {
    let mut out: Vec<CnnRatio> = Vec::new();
    for r in rows
        .iter()
        .filter(|r| r.runner != "pytorch" && r.round == 0)
    {
        let pairs: Vec<(f64, f64)> = rows
            .iter()
            .filter(|s| s.runner == r.runner && s.arch == r.arch && s.threads == r.threads)
            .filter_map(|s| {
                let t = rows.iter().find(|t| {
                    t.runner == "pytorch"
                        && t.arch == s.arch
                        && t.threads == s.threads
                        && t.round == s.round
                })?;
                Some((t.train_ms / s.train_ms, t.forward_ms / s.forward_ms))
            })
            .collect();
        if pairs.is_empty() {
            continue;
        }
        let train: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        out.push(CnnRatio {
            arch: r.arch.clone(),
            runner: r.runner.clone(),
            threads: r.threads,
            median: median(train.clone()),
            min: train.iter().copied().fold(f64::INFINITY, f64::min),
            max: train.iter().copied().fold(0.0, f64::max),
            forward_median: median(pairs.iter().map(|p| p.1).collect()),
        });
    }
    out
}

fn print(report: &CnnReport) {
    println!("convolutional encoders, uint8 batches (median per batch, each round):");
    println!("  strata bf16: {}", report.bf16_kernel);
    for r in &report.rows {
        println!(
            "  round {} {:<11} {:>2}x{:<2}x{} batch {} {:<11} {} thread(s): forward {:>7.2} ms, forward+backward {:>7.2} ms, {:>6.0} images/s",
            r.round + 1, r.arch, r.shape[0], r.shape[1], r.shape[2], r.batch, r.runner, r.threads,
            r.forward_ms, r.train_ms, r.train_images_per_sec
        );
    }
    for q in &report.ratios {
        println!(
            "  {} {} thread(s): {} at {:.2}x PyTorch's speed (forward+backward; rounds {:.2}-{:.2}x), forward alone {:.2}x",
            q.arch, q.threads, q.runner, q.median, q.min, q.max, q.forward_median
        );
    }
    for r in report
        .rows
        .iter()
        .filter(|r| r.runner == "strata" && r.threads == 1 && r.round == 0)
    {
        println!(
            "  {} batch of {} observations: {:.1} MB as uint8, {:.1} MB as f32; {:.0} MB kept for the backward pass",
            r.arch,
            r.batch,
            r.batch_bytes_u8 as f64 / 1e6,
            r.batch_bytes_f32 as f64 / 1e6,
            r.working_bytes.unwrap_or(0) as f64 / 1e6
        );
    }
    if let Some(why) = &report.torch_missing {
        println!("  (no PyTorch comparison: {why})");
    }
}
