//! Training on observation rows split as the experience buffer keeps them (image values
//! as bytes) against training on float rows.

use std::ops::Range;

use rand::SeedableRng;

use super::tests::{mixed_images, mixed_rows};
use super::*;
use crate::obs_batch::ObsBatch;

/// `rows` split as the experience buffer keeps them: the values in `spans` as bytes.
fn split(rows: &[f32], dim: usize, spans: &[Range<usize>]) -> (Vec<f32>, Vec<u8>) {
    let (mut floats, mut bytes) = (Vec::new(), Vec::new());
    for row in rows.chunks_exact(dim) {
        let mut at = 0;
        for span in spans {
            floats.extend_from_slice(&row[at..span.start]);
            bytes.extend(row[span.clone()].iter().map(|&v| v as u8));
            at = span.end;
        }
        floats.extend_from_slice(&row[at..]);
    }
    (floats, bytes)
}

/// Training on rows split as the buffer keeps them gives what training on float rows
/// gives, bit for bit: with the images read in place (one byte image a whole row, or
/// images among other values), and with byte spans other than the images (read as
/// floats).
#[test]
fn split_rows_train_exactly_as_float_rows() {
    use crate::conv::ImageShape;
    use crate::encoder::PixelScale;
    let (mixed_dim, mut mixed) = mixed_images();
    let whole = vec![ImageInput {
        offset: 0,
        shape: ImageShape {
            height: 10,
            width: 10,
            channels: 3,
        },
        scale: PixelScale::Byte,
    }];
    // Boolean images hold 0 and 1, which bytes keep.
    mixed[1].scale = PixelScale::Unit;
    let spans_of = |images: &[ImageInput]| -> Vec<Range<usize>> {
        images
            .iter()
            .map(|i| i.offset..i.offset + i.shape.len())
            .collect()
    };
    let cases = [
        (300, whole.clone(), spans_of(&whole)),
        (mixed_dim, mixed.clone(), spans_of(&mixed)),
        (mixed_dim, mixed.clone(), spans_of(&mixed[..1])),
    ];
    for (dim, images, spans) in cases {
        let mut rng = SampleRng::seed_from_u64(8);
        let head = Head::Categorical { n: 3 };
        let config = NetworkConfig::default();
        let mut model = ActorCriticNet::with_images(dim, &images, head, &config, &mut rng).unwrap();
        let batch = 5;
        let mut rows = mixed_rows(&mut rng, &images, dim, batch);
        for row in rows.chunks_exact_mut(dim) {
            for image in images.iter().filter(|i| i.scale == PixelScale::Unit) {
                for v in &mut row[image.offset..image.offset + image.shape.len()] {
                    *v = v.round();
                }
            }
        }
        let actions: Vec<f32> = (0..batch).map(|i| (i % 3) as f32).collect();
        let (floats, bytes) = split(&rows, dim, &spans);
        let split_rows = ObsBatch::Split(crate::obs_batch::SplitRows {
            dim,
            byte_spans: &spans,
            floats: &floats,
            bytes: &bytes,
        });
        let mut results = Vec::new();
        for obs in [ObsBatch::Floats(&rows), split_rows] {
            let mut e = Evaluation::default();
            model.evaluate(obs, &actions, &mut e);
            let ones = vec![1.0; batch];
            model.backward(&ones, &ones, &ones, &[]);
            let grads = model.grads.clone();
            model.zero_grad();
            results.push((e.log_probs, e.entropy, e.values, grads));
        }
        assert!(results[0].3.iter().any(|g| *g != 0.0));
        assert!(results[0] == results[1], "{dim} values, spans {spans:?}");
    }
}
