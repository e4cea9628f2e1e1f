//! Every kernel path this CPU can execute, checked against float64 references on the same
//! inputs: the MLP, the CNN (float32 and bfloat16 convolutions, bytes and floats in),
//! the LSTM and the GRU, forward and every gradient (parameters, and inputs where the
//! layer has them).
//!
//! The references are plain loops in float64 written from the layers' definitions. Their
//! gradients are central differences of the float64 forward pass, which are exact to
//! float64's rounding for a piecewise-multilinear network (ReLU layers, evaluated with
//! the ReLU masks the float32 pass chose, so no probe crosses a kink) and within `h^2`
//! for the smooth cells. The tolerance of each value is derived from the path's
//! precision, not tuned: every value carries the magnitude of the terms it was summed
//! from (`m`, with `|w|` for `w`), a sum of `k` terms in float32 is off by at most `k`
//! units of float32's rounding of that magnitude, a bfloat16 operand by 2^-8 of it, and
//! the fast tanh by a few float32 units; the layers' errors add (a first-order bound, so
//! the worst case, far above the typical error: each run prints the share it used). A
//! wrong term in a gradient is off by its own size, far outside.
//!
//! The paths are forced one after another, one test at a time (the choice is per process),
//! so any machine checks every path it has; `STRATA_KERNEL_PATH` runs the rest of the
//! suite on one.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use strata_nn::{
    force_kernel_path, Activation, CellKind, Cnn, CnnArch, CnnCache, ConvPrecision, ImageShape,
    KernelPath, Mlp, MlpCache, Pixels, Recurrent, RecurrentCache,
};

/// Float32's unit roundoff.
const U32: f64 = 1.0 / (1u64 << 24) as f64;
/// A bfloat16 operand's relative rounding, and a product of two of them.
const BF16_PRODUCT: f64 = 2.0 / 256.0;
/// The fast tanh's error relative to the magnitude of its input's terms: a few float32
/// units (within 1e-6 of libm's over [-20, 20], `activation.rs`, where |tanh| >= 0.5
/// makes 1e-6 about 17 units; near zero it is as exact as its argument).
const TANH: f64 = 32.0 * U32;

/// A value and the magnitude of the terms it came from (`m >= |v|`).
#[derive(Clone, Copy, Debug)]
struct Lane {
    v: f64,
    m: f64,
}

impl Lane {
    fn exact(v: f64) -> Lane {
        Lane { v, m: v.abs() }
    }
    fn mul(self, o: Lane) -> Lane {
        Lane {
            v: self.v * o.v,
            m: self.m * o.m,
        }
    }
    fn add(self, o: Lane) -> Lane {
        Lane {
            v: self.v + o.v,
            m: self.m + o.m,
        }
    }
    fn tanh(self) -> Lane {
        Lane {
            v: self.v.tanh(),
            m: self.m, // tanh is 1-Lipschitz and |tanh z| <= |z| <= m
        }
    }
    fn sigmoid(self) -> Lane {
        Lane {
            v: 0.5 + 0.5 * (0.5 * self.v).tanh(),
            m: 0.5 + 0.25 * self.m,
        }
    }
}

/// `rows x fan_in` lanes times `fan_in x fan_out` weights plus biases.
fn dense(x: &[Lane], fan_in: usize, w: &[f64], b: &[f64]) -> Vec<Lane> {
    let fan_out = b.len();
    let mut y = Vec::with_capacity(x.len() / fan_in * fan_out);
    for row in x.chunks_exact(fan_in) {
        for c in 0..fan_out {
            let mut acc = Lane::exact(b[c]);
            for (i, xi) in row.iter().enumerate() {
                acc = acc.add(xi.mul(Lane::exact(w[i * fan_out + c])));
            }
            y.push(acc);
        }
    }
    y
}

fn lanes(values: &[f64]) -> Vec<Lane> {
    values.iter().copied().map(Lane::exact).collect()
}

fn widen(values: &[f32]) -> Vec<f64> {
    values.iter().map(|v| f64::from(*v)).collect()
}

/// A model under test: its float32 pass and its float64 reference.
trait Case {
    fn name(&self) -> String;
    fn params(&self) -> &[f32];
    /// Inputs with a gradient (empty when the layer gives its input none).
    fn inputs(&self) -> &[f32];
    /// Values the model outputs.
    fn output_len(&self) -> usize;
    /// The float32 outputs, parameter gradients and input gradients of `d_out`.
    fn run(&mut self, d_out: &[f32]) -> (Vec<f32>, Vec<f32>, Vec<f32>);
    /// The float64 outputs for `params` and `inputs`.
    fn reference(&self, params: &[f64], inputs: &[f64]) -> Vec<Lane>;
    /// Relative error of one float32 value: the longest sum's units, and bfloat16's.
    fn precision(&self) -> f64;
    /// Where each parameter tensor lies (every one gets probes).
    fn tensors(&self) -> Vec<std::ops::Range<usize>>;
}

/// A few indices of every tensor, its first and last among them: `per` a tensor.
fn probes(tensors: &[std::ops::Range<usize>], per: usize) -> Vec<usize> {
    let mut at: Vec<usize> = tensors
        .iter()
        .flat_map(|t| {
            let step = (t.len() / per).max(1);
            t.clone().step_by(step).chain(t.end.checked_sub(1))
        })
        .collect();
    at.sort_unstable();
    at.dedup();
    at
}

/// Checks one case on the current path: outputs, then every parameter and input gradient
/// against central differences of `sum(d_out * reference)`.
fn check(case: &mut dyn Case, rng: &mut Xoshiro256PlusPlus) {
    let name = case.name();
    let (p64, x64) = (widen(case.params()), widen(case.inputs()));
    let d_out: Vec<f32> = (0..case.output_len())
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let (got, grads, d_inputs) = case.run(&d_out);
    // After the float32 pass: a CNN's reference takes its ReLU masks.
    let want = case.reference(&p64, &x64);
    assert_eq!(got.len(), want.len(), "{name}: output count");
    let gamma = case.precision();
    let floor = 1e-7 * want.iter().map(|l| l.m).fold(0.0, f64::max);
    // The largest share of its tolerance any value used: printed, so a run shows how
    // close each path comes (`--nocapture`).
    let worst = std::cell::Cell::new((0.0_f64, 0.0_f64));
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let tol = gamma * w.m + floor;
        let err = (f64::from(*g) - w.v).abs();
        assert!(
            err <= tol,
            "{name}: output {i}: {g} against {} (tolerance {tol:.3e})",
            w.v
        );
        worst.set((worst.get().0.max(err / tol), worst.get().1));
    }
    // The loss and the magnitude of its terms, as functions of one perturbed value.
    let loss = |p: &[f64], x: &[f64]| -> (f64, f64) {
        let out = case.reference(p, x);
        let d = d_out.iter().map(|v| f64::from(*v));
        out.iter().zip(d).fold((0.0, 0.0), |(l, m), (o, d)| {
            (l + o.v * d, m + o.m * d.abs())
        })
    };
    let probe = |values: &mut Vec<f64>, i: usize, f: &dyn Fn(&[f64]) -> (f64, f64)| {
        let orig = values[i];
        let h = 1e-6 * orig.abs().max(1e-2);
        values[i] = orig + h;
        let up = f(values);
        values[i] = orig - h;
        let down = f(values);
        values[i] = orig;
        (
            (up.0 - down.0) / (2.0 * h),
            ((up.1 - down.1) / (2.0 * h)).abs(),
        )
    };
    let compare = |what: &str, i: usize, got: f32, (want, mag): (f64, f64), scale: f64| {
        // Forward and backward each round: twice the forward's relative error, of the
        // magnitude of the gradient's terms (how `m` moves with the value).
        let tol = 2.0 * gamma * mag + 1e-6 * scale;
        let err = (f64::from(got) - want).abs();
        assert!(
            err <= tol,
            "{name}: {what} {i}: {got} against {want} (magnitude {mag:.3e}, tolerance {tol:.3e})"
        );
        worst.set((worst.get().0, worst.get().1.max(err / tol)));
    };
    let mut p = p64.clone();
    let param_probes: Vec<_> = probes(&case.tensors(), 24)
        .into_iter()
        .map(|i| (i, probe(&mut p, i, &|p| loss(p, &x64))))
        .collect();
    let scale = param_probes
        .iter()
        .map(|(_, (g, _))| g.abs())
        .fold(0.0, f64::max);
    for (i, want) in param_probes {
        compare("parameter gradient", i, grads[i], want, scale);
    }
    let mut x = x64.clone();
    let whole = std::iter::once(0..x.len()).collect::<Vec<_>>();
    for i in probes(&whole, 60) {
        let want = probe(&mut x, i, &|x| loss(&p64, x));
        compare("input gradient", i, d_inputs[i], want, scale);
    }
    let (outputs, gradients) = worst.get();
    eprintln!(
        "{name} on {}: worst error {outputs:.3} of the outputs' tolerance, {gradients:.3} of the gradients'",
        strata_nn::kernel_path()
    );
}

struct MlpCase {
    mlp: Mlp,
    params: Vec<f32>,
    input: Vec<f32>,
    batch: usize,
}

impl Case for MlpCase {
    fn name(&self) -> String {
        format!("mlp {:?}", self.mlp.sizes())
    }
    fn params(&self) -> &[f32] {
        &self.params
    }
    fn inputs(&self) -> &[f32] {
        &self.input
    }
    fn output_len(&self) -> usize {
        self.batch * self.mlp.output_size()
    }
    fn run(&mut self, d_out: &[f32]) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut cache = MlpCache::default();
        let out = self
            .mlp
            .forward(&self.params, &self.input, self.batch, &mut cache)
            .to_vec();
        let (mut grads, mut d_in) = (vec![0.0; self.params.len()], Vec::new());
        self.mlp
            .backward_with_input(&self.params, &mut cache, d_out, &mut grads, &mut d_in);
        (out, grads, d_in)
    }
    fn reference(&self, params: &[f64], inputs: &[f64]) -> Vec<Lane> {
        let layers = self.mlp.sizes().len() - 1;
        let layout = self.mlp.layout();
        let mut x = lanes(inputs);
        for l in 0..layers {
            let (w, b) = (
                &params[layout.range(2 * l)],
                &params[layout.range(2 * l + 1)],
            );
            x = dense(&x, self.mlp.sizes()[l], w, b);
            if l + 1 < layers {
                x.iter_mut().for_each(|v| *v = v.tanh());
            }
        }
        x
    }
    fn precision(&self) -> f64 {
        // Each layer's sums (its fan-in forward, its fan-out and the batch backward), and
        // each hidden layer's tanh: the layers' errors add.
        let sizes = self.mlp.sizes();
        let sums: usize = sizes
            .windows(2)
            .map(|w| w[0].max(w[1]).max(self.batch) + 2)
            .sum();
        sums as f64 * U32 + (sizes.len() - 2) as f64 * TANH
    }
    fn tensors(&self) -> Vec<std::ops::Range<usize>> {
        self.mlp
            .layout()
            .slots()
            .iter()
            .map(|s| s.range.clone())
            .collect()
    }
}

struct CnnCase {
    cnn: Cnn,
    params: Vec<f32>,
    bytes: Option<Vec<u8>>,
    floats: Vec<f32>,
    batch: usize,
    /// Each ReLU's choice in the float32 pass (conv layers, then the features).
    masks: Vec<Vec<bool>>,
}

impl CnnCase {
    fn pixels(&self) -> Pixels<'_> {
        match &self.bytes {
            Some(b) => Pixels::U8(b),
            None => Pixels::F32(&self.floats),
        }
    }
}

impl Case for CnnCase {
    fn name(&self) -> String {
        let input = if self.bytes.is_some() {
            "bytes"
        } else {
            "floats"
        };
        format!(
            "{} {} on {input}",
            self.cnn.arch().name(),
            self.cnn.precision().name()
        )
    }
    fn params(&self) -> &[f32] {
        &self.params
    }
    fn inputs(&self) -> &[f32] {
        &[] // pixels get no gradient
    }
    fn output_len(&self) -> usize {
        self.batch * self.cnn.features()
    }
    fn run(&mut self, d_out: &[f32]) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut cache = CnnCache::default();
        let out = self
            .cnn
            .forward(&self.params, self.pixels(), self.batch, &mut cache)
            .to_vec();
        self.masks = (0..self.cnn.convs().len())
            .map(|l| cache.layer_output(l).iter().map(|v| *v > 0.0).collect())
            .chain(std::iter::once(out.iter().map(|v| *v > 0.0).collect()))
            .collect();
        let mut grads = vec![0.0; self.params.len()];
        self.cnn
            .backward(&self.params, &mut cache, d_out, &mut grads);
        (out, grads, Vec::new())
    }
    fn reference(&self, params: &[f64], _: &[f64]) -> Vec<Lane> {
        let layout = self.cnn.layout();
        let mut x: Vec<Lane> = match &self.bytes {
            Some(b) => b
                .iter()
                .map(|v| Lane::exact(f64::from(*v) / 255.0))
                .collect(),
            None => lanes(&widen(&self.floats)),
        };
        let relu = |y: &mut Vec<Lane>, mask: &[bool]| {
            for (v, on) in y.iter_mut().zip(mask) {
                if !on {
                    *v = Lane { v: 0.0, m: 0.0 };
                }
            }
        };
        for (l, conv) in self.cnn.convs().iter().enumerate() {
            let (w, b) = (
                &params[layout.range(2 * l)],
                &params[layout.range(2 * l + 1)],
            );
            let (inp, out) = (conv.input, conv.output().unwrap());
            let (k, s, pl) = (conv.kernel, conv.stride, conv.patch_len());
            let mut y = Vec::with_capacity(self.batch * out.len());
            for image in x.chunks_exact(inp.len()) {
                for (oy, ox) in (0..out.height).flat_map(|r| (0..out.width).map(move |c| (r, c))) {
                    let mut patch = Vec::with_capacity(pl);
                    for (ky, kx) in (0..k).flat_map(|r| (0..k).map(move |c| (r, c))) {
                        let at = ((oy * s + ky) * inp.width + ox * s + kx) * inp.channels;
                        patch.extend_from_slice(&image[at..at + inp.channels]);
                    }
                    for o in 0..conv.out_channels {
                        let mut acc = Lane::exact(b[o]);
                        for (p, wv) in patch.iter().zip(&w[o * pl..(o + 1) * pl]) {
                            acc = acc.add(p.mul(Lane::exact(*wv)));
                        }
                        y.push(acc);
                    }
                }
            }
            relu(&mut y, &self.masks[l]);
            x = y;
        }
        let fc = self.cnn.convs().len();
        let (w, b) = (
            &params[layout.range(2 * fc)],
            &params[layout.range(2 * fc + 1)],
        );
        let mut y = dense(&x, self.cnn.flat_size(), w, b);
        relu(&mut y, &self.masks[fc]);
        y
    }
    fn precision(&self) -> f64 {
        // Each layer's longest sum (its patch forward; its weight gradient over the
        // batch's positions and its input gradient over the filters backward), the
        // layers' errors added; a bfloat16 product per convolution.
        let convs = self.cnn.convs();
        let conv_sums: usize = convs
            .iter()
            .map(|c| {
                let backward =
                    (self.batch * c.positions()).max(c.out_channels * c.kernel * c.kernel);
                c.patch_len().max(backward) + 2
            })
            .sum();
        let fc = self
            .cnn
            .flat_size()
            .max(self.cnn.features())
            .max(self.batch)
            + 2;
        let f32_sums = (conv_sums + fc) as f64 * U32;
        match self.cnn.precision() {
            ConvPrecision::F32 => f32_sums,
            ConvPrecision::Bf16 => f32_sums + convs.len() as f64 * BF16_PRODUCT,
        }
    }
    fn tensors(&self) -> Vec<std::ops::Range<usize>> {
        self.cnn
            .layout()
            .slots()
            .iter()
            .map(|s| s.range.clone())
            .collect()
    }
}

struct RecurrentCase {
    cell: Recurrent,
    params: Vec<f32>,
    xs: Vec<f32>,
    starts: Vec<bool>,
    state0: Vec<f32>,
    steps: usize,
    batch: usize,
}

impl Case for RecurrentCase {
    fn name(&self) -> String {
        format!(
            "{:?} {}x{}",
            self.cell.kind(),
            self.cell.input(),
            self.cell.hidden()
        )
    }
    fn params(&self) -> &[f32] {
        &self.params
    }
    fn inputs(&self) -> &[f32] {
        &self.xs
    }
    fn output_len(&self) -> usize {
        self.steps * self.batch * self.cell.hidden()
    }
    fn run(&mut self, d_out: &[f32]) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut cache = RecurrentCache::default();
        let shape = (self.steps, self.batch);
        let out = self
            .cell
            .forward(
                &self.params,
                &self.xs,
                &self.starts,
                &self.state0,
                shape,
                &mut cache,
            )
            .to_vec();
        let (mut grads, mut d_xs) = (vec![0.0; self.params.len()], Vec::new());
        self.cell
            .backward(&self.params, &mut cache, d_out, &mut grads, &mut d_xs);
        (out, grads, d_xs)
    }
    fn reference(&self, params: &[f64], xs: &[f64]) -> Vec<Lane> {
        let (h, layout) = (self.cell.hidden(), self.cell.layout());
        let [w_ih, w_hh, b_ih, b_hh] = std::array::from_fn(|i| &params[layout.range(i)]);
        let s = self.cell.state_size();
        let mut state: Vec<Lane> = lanes(&widen(&self.state0));
        let mut outputs = Vec::new();
        let x = lanes(xs);
        for t in 0..self.steps {
            for b in 0..self.batch {
                let row = t * self.batch + b;
                let st = &mut state[b * s..(b + 1) * s];
                if self.starts[row] {
                    st.fill(Lane::exact(0.0));
                }
                let xi = &x[row * self.cell.input()..(row + 1) * self.cell.input()];
                let a = dense(xi, self.cell.input(), w_ih, b_ih);
                let p = dense(&st[..h], h, w_hh, b_hh);
                match self.cell.kind() {
                    CellKind::Lstm => {
                        for j in 0..h {
                            let gate = |q: usize| a[q * h + j].add(p[q * h + j]);
                            let (i, f) = (gate(0).sigmoid(), gate(1).sigmoid());
                            let (g, o) = (gate(2).tanh(), gate(3).sigmoid());
                            let c = f.mul(st[h + j]).add(i.mul(g));
                            st[j] = o.mul(c.tanh());
                            st[h + j] = c;
                        }
                    }
                    CellKind::Gru => {
                        let before: Vec<Lane> = st.to_vec();
                        for j in 0..h {
                            let r = a[j].add(p[j]).sigmoid();
                            let z = a[h + j].add(p[h + j]).sigmoid();
                            let n = a[2 * h + j].add(r.mul(p[2 * h + j])).tanh();
                            let one_minus_z = Lane {
                                v: 1.0 - z.v,
                                m: 1.0 + z.m,
                            };
                            st[j] = one_minus_z.mul(n).add(z.mul(before[j]));
                        }
                    }
                }
                outputs.extend_from_slice(&st[..h]);
            }
        }
        outputs
    }
    fn precision(&self) -> f64 {
        let longest = [
            self.cell.input(),
            self.cell.hidden(),
            self.cell.gates(),
            self.steps * self.batch,
        ]
        .into_iter()
        .max()
        .unwrap();
        // Errors carried through the steps' recurrence: one sum's worth a step.
        self.steps as f64 * ((longest as f64 + 4.0) * U32 + TANH)
    }
    fn tensors(&self) -> Vec<std::ops::Range<usize>> {
        self.cell
            .layout()
            .slots()
            .iter()
            .map(|s| s.range.clone())
            .collect()
    }
}

fn uniform(rng: &mut Xoshiro256PlusPlus, n: usize, bound: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-bound..bound)).collect()
}

fn cases(rng: &mut Xoshiro256PlusPlus) -> Vec<Box<dyn Case>> {
    let mut cases: Vec<Box<dyn Case>> = Vec::new();
    let mlp = Mlp::new(&[11, 64, 64, 3], Activation::Tanh);
    let mut params = mlp.init_orthogonal(2f32.sqrt(), 0.5, rng);
    params
        .iter_mut()
        .for_each(|p| *p += rng.random_range(-0.05..0.05));
    cases.push(Box::new(MlpCase {
        input: uniform(rng, 5 * 11, 2.0),
        mlp,
        params,
        batch: 5,
    }));
    let shape = |height, width, channels| ImageShape {
        height,
        width,
        channels,
    };
    for (arch, image, precision, bytes) in [
        (
            CnnArch::NatureCnn,
            shape(36, 37, 2),
            ConvPrecision::F32,
            true,
        ),
        (
            CnnArch::NatureCnn,
            shape(36, 37, 2),
            ConvPrecision::Bf16,
            true,
        ),
        (
            CnnArch::MinatarCnn,
            shape(10, 10, 4),
            ConvPrecision::F32,
            false,
        ),
        (
            CnnArch::MinatarCnn,
            shape(10, 10, 4),
            ConvPrecision::Bf16,
            false,
        ),
    ] {
        let cnn = Cnn::new(arch, image).unwrap().with_precision(precision);
        let mut params = cnn.init_orthogonal(2f32.sqrt(), rng);
        params
            .iter_mut()
            .for_each(|p| *p += rng.random_range(-0.02..0.02));
        let batch = 5; // a whole forward task of four images and a partial one
        let n = batch * image.len();
        let (bytes, floats) = if bytes {
            (
                Some((0..n).map(|_| rng.random_range(0..=255)).collect()),
                Vec::new(),
            )
        } else {
            (None, (0..n).map(|_| rng.random_range(0.0..1.0)).collect())
        };
        cases.push(Box::new(CnnCase {
            cnn,
            params,
            bytes,
            floats,
            batch,
            masks: Vec::new(),
        }));
    }
    for kind in [CellKind::Lstm, CellKind::Gru] {
        let cell = Recurrent::new(kind, 6, 16);
        let (steps, batch) = (5, 3);
        let params = cell.init_uniform(rng);
        let mut starts = vec![false; steps * batch];
        starts[2 * batch + 1] = true; // a reset mid-sequence
        cases.push(Box::new(RecurrentCase {
            xs: uniform(rng, steps * batch * 6, 1.5),
            starts,
            state0: uniform(rng, batch * cell.state_size(), 0.8),
            params,
            cell,
            steps,
            batch,
        }));
    }
    cases
}

/// Held by each test that forces paths: the path is the process's, and the harness runs
/// tests on parallel threads.
static FORCING: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn every_path_matches_the_float64_references() {
    let _one_at_a_time = FORCING.lock().unwrap_or_else(|e| e.into_inner());
    let paths = KernelPath::all_supported();
    for path in &paths {
        force_kernel_path(*path).unwrap();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(65);
        for mut case in cases(&mut rng) {
            check(case.as_mut(), &mut rng);
        }
    }
    eprintln!("checked paths: {paths:?}");
}

/// A case whose gradient leaves out every output past the first `keep`: the terms of
/// some samples missing, as a wrong backward pass might.
struct Broken {
    case: Box<dyn Case>,
    keep: usize,
}

impl Case for Broken {
    fn name(&self) -> String {
        self.case.name()
    }
    fn params(&self) -> &[f32] {
        self.case.params()
    }
    fn inputs(&self) -> &[f32] {
        self.case.inputs()
    }
    fn output_len(&self) -> usize {
        self.case.output_len()
    }
    fn run(&mut self, d_out: &[f32]) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut kept = d_out.to_vec();
        kept[self.keep..].fill(0.0);
        self.case.run(&kept)
    }
    fn reference(&self, params: &[f64], inputs: &[f64]) -> Vec<Lane> {
        self.case.reference(params, inputs)
    }
    fn precision(&self) -> f64 {
        self.case.precision()
    }
    fn tensors(&self) -> Vec<std::ops::Range<usize>> {
        self.case.tensors()
    }
}

/// The tolerances bite: an MLP's gradient without its second sample fails them.
#[test]
#[should_panic(expected = "parameter gradient")]
fn a_wrong_gradient_term_fails_the_reference_check() {
    let _one_at_a_time = FORCING.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(65);
    let mlp = Mlp::new(&[4, 8, 3], Activation::Tanh);
    let params = mlp.init_orthogonal(1.0, 1.0, &mut rng);
    let case = MlpCase {
        input: uniform(&mut rng, 2 * 4, 1.0),
        mlp,
        params,
        batch: 2,
    };
    check(
        &mut Broken {
            case: Box::new(case),
            keep: 3,
        },
        &mut rng,
    );
}

/// The bfloat16 tolerance (the widest) bites too: a convolution's gradient without the
/// last of five images fails it.
#[test]
#[should_panic(expected = "parameter gradient")]
fn a_wrong_bf16_gradient_fails_the_reference_check() {
    let _one_at_a_time = FORCING.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(65);
    let case = cases(&mut rng)
        .into_iter()
        .find(|c| c.name() == "minatar_cnn bf16 on floats")
        .expect("the bf16 MinAtar case");
    let keep = case.output_len() / 5 * 4;
    check(&mut Broken { case, keep }, &mut rng);
}

/// The probe a float32 finite-difference test once failed on an AVX2 CPU (parameter 1133
/// of a small NatureCNN: numeric 0.020757 against analytic 0.018186), rebuilt with the
/// same draws: on every path the analytic gradient matches the float64 reference, so
/// the miss was the float32 difference quotient's rounding (a sum of 2,560 float32
/// outputs, divided by 2e-3), not the gradient.
#[test]
fn the_cnn_probe_float32_differences_missed_is_right_on_every_path() {
    let _one_at_a_time = FORCING.lock().unwrap_or_else(|e| e.into_inner());
    for path in KernelPath::all_supported() {
        force_kernel_path(path).unwrap();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(4);
        let image = ImageShape {
            height: 36,
            width: 37,
            channels: 2,
        };
        let cnn = Cnn::new(CnnArch::NatureCnn, image).unwrap();
        let mut params = cnn.init_orthogonal(2f32.sqrt(), &mut rng);
        for p in params.iter_mut() {
            *p += rng.random_range(-0.02..0.02);
        }
        let batch = 5;
        let pixels: Vec<u8> = (0..batch * image.len())
            .map(|_| rng.random_range(0..=255))
            .collect();
        let d_out: Vec<f32> = (0..batch * cnn.features())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let mut case = CnnCase {
            cnn,
            params,
            bytes: Some(pixels),
            floats: Vec::new(),
            batch,
            masks: Vec::new(),
        };
        let (_, grads, _) = case.run(&d_out);
        let mut p = widen(&case.params);
        let at = |p: &[f64]| -> f64 {
            let out = case.reference(p, &[]);
            out.iter()
                .zip(&d_out)
                .map(|(o, d)| o.v * f64::from(*d))
                .sum()
        };
        let i = 1133;
        let h = 1e-6;
        let orig = p[i];
        p[i] = orig + h;
        let up = at(&p);
        p[i] = orig - h;
        let down = at(&p);
        let want = (up - down) / (2.0 * h);
        let got = f64::from(grads[i]);
        eprintln!("{path}: parameter {i}: analytic {got:.7}, float64 reference {want:.7}");
        assert!(
            (got - want).abs() < 1e-5 * want.abs().max(1.0),
            "{path}: {got} against {want}"
        );
    }
}
