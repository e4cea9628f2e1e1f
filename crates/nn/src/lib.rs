//! Policy and value networks for Strata: small MLPs on the CPU, fast enough to be the hot
//! path of PPO.
//!
//! [`ActorCriticNet`] composes an optional encoder and recurrent core with separate policy
//! and value [`Mlp`]s, the policy ending in a categorical or diagonal-Gaussian [`Head`];
//! every parameter lies in one flat vector laid out by a [`ParamBlocks`] (which also names
//! the checkpoint tensors), with one [`Adam`] over all of them. PPO talks to it only
//! through the [`ActorCritic`] trait, so another backend (a GPU one) can replace it without
//! touching PPO.
//!
//! ```
//! use rand::SeedableRng;
//! use strata_nn::{ActorCritic, Head, Memory, ActorCriticNet, NetworkConfig, SampleRng};
//! let mut rng = SampleRng::seed_from_u64(0);
//! let mut model = ActorCriticNet::new(4, Head::Categorical { n: 2 },
//!     &NetworkConfig::default(), &mut rng);
//! let obs = [0.0_f32; 8];
//! let (mut a, mut lp, mut v) = ([0.0; 2], [0.0; 2], [0.0; 2]);
//! model.act(&obs, Memory::none(), &mut rng, &[], &mut a, &mut lp, &mut v);
//! assert!(a.iter().all(|x| *x == 0.0 || *x == 1.0));
//! ```
//!
//! Image observations get a convolutional encoder ([`Cnn`]: NatureCNN, or the MinAtar
//! agent's small one, [`CnnArch`]) that reads `u8` pixels directly and runs its
//! convolutions as `im2col` + matrix products on the current rayon pool;
//! [`ActorCriticNet::with_images`] puts one per image ([`ImageInput`]) in front of the
//! policy and value networks, shared by both.
//!
//! A recurrent core ([`Core`]: LSTM or GRU layers, [`Recurrent`]) may sit between the
//! encoder and the two networks. A model with one acts with each env's state
//! ([`Memory`]) and trains on whole sequences from their stored states ([`Sequences`]);
//! cells follow PyTorch's equations and gate orders (`fixtures/rnn`).
//!
//! Matrix products go through `gemm`'s kernels behind a bounds-checked wrapper; the
//! backward passes are written by hand and checked against finite differences, the
//! encoders' forward passes against PyTorch on fixed weights (`fixtures/cnn`), and every
//! layer, forward and backward, against float64 references on each kernel path
//! (`tests/kernel_paths.rs`).
//!
//! Every kernel runs one [`KernelPath`] for the whole process (AMX, AVX-512 with or
//! without BF16, AVX2/FMA, NEON, portable): the fastest the CPU has, or the one
//! [`KERNEL_PATH_VAR`] names. Results are reproducible to the bit on one machine and
//! path, and agree across paths to float32's (or bfloat16's) precision.

mod activation;
mod actor_critic;
mod actor_critic_net;
mod adam;
mod amx;
mod bf16;
mod branches;
mod cnn;
mod cnn_arch;
mod cnn_gather;
mod conv;
mod distribution;
mod encoder;
mod grad_clip;
mod head;
mod init;
mod kernel_path;
#[macro_use]
mod kernels;
mod matmul;
mod mlp;
mod network;
mod obs_batch;
mod params;
mod recurrent;
mod recurrent_core;
mod small_matmul;

pub use activation::{fast_tanh, Activation};
pub use actor_critic::{ActorCritic, Evaluation, Memory, NamedTensor, SampleRng, Sequences};
pub use actor_critic_net::ActorCriticNet;
pub use adam::Adam;
pub use amx::NO_TILES_VAR as AMX_OFF_VAR;
pub use bf16::{accelerated as bf16_accelerated, kernel as bf16_kernel, Bf16Kernel};
pub use cnn::{Cnn, CnnArch, CnnCache, ConvSpec, ImageTooSmall, Pixels};
pub use cnn_arch::ConvPrecision;
pub use conv::{Conv2d, ImageShape};
pub use distribution::{
    categorical_eval, categorical_mode, categorical_sample, gaussian_entropy, gaussian_eval,
    gaussian_sample, sde_eval, sde_sample, standard_normals,
};
pub use encoder::{ImageInput, PixelScale};
pub use grad_clip::{GradClip, GradNorms};
pub use head::Head;
pub use kernel_path::{
    force_kernel_path, kernel_path, select_kernel_path, KernelPath, KernelPathError,
    KERNEL_PATH_VAR,
};
pub use kernels::round_to_bytes;
pub use mlp::{Mlp, MlpCache};
pub use network::{Core, Encoder, NetworkConfig, SdeHold};
pub use obs_batch::{ObsBatch, SplitRows};
pub use params::{cut, cut_mut, ParamBlocks, ParamSlot};
pub use recurrent::{CellKind, Recurrent, RecurrentCache};

use thiserror::Error;

/// Errors loading model state.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum NnError {
    /// A tensor the model needs is absent.
    #[error("checkpoint lacks tensor `{0}`")]
    MissingTensor(String),
    /// A tensor has another shape than the model's.
    #[error("tensor `{name}` has shape {found:?}, the model needs {expected:?}")]
    ShapeMismatch {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    /// A flat parameter vector has another length than the model's.
    #[error("parameter vector has {found} values, the model has {expected}")]
    ParamCount { expected: usize, found: usize },
    /// A tensor holds NaN or infinity.
    #[error("tensor `{name}` holds a non-finite value at index {index}")]
    NonFinite { name: String, index: usize },
}
