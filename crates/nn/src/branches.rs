//! Two networks reading one input (the policy and value networks on an encoder's features
//! or a shared core's outputs, an actor's and a critic's core on one observation): how
//! they run side by side, and how their gradients meet at the input they share.

/// Runs `a` and `b`, on two threads of the calling rayon pool when `parallel`; each
/// result is the same either way.
pub(crate) fn join<A: Send, B: Send>(
    parallel: bool,
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    if parallel {
        rayon::join(a, b)
    } else {
        (a(), b())
    }
}

/// Adds the gradient `other` branch sends back to the shared input into `into`: when
/// both branches read the same input, its gradient is the sum of theirs.
pub(crate) fn add_branch_gradient(into: &mut [f32], other: &[f32]) {
    for (g, o) in into.iter_mut().zip(other) {
        *g += o;
    }
}
