//! Arrow building blocks the tables share, and the column codecs the sample columns are
//! declared with: each codec says how one column's values are held in memory (a
//! [`SampleBatch`](crate::SampleBatch) column), in a record, and in Arrow.

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float32Array, Float64Array, ListArray, RecordBatch,
    StringArray, TimestampNanosecondArray, UInt32Array, UInt64Array,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, SchemaRef, TimeUnit};

/// Nanosecond UTC timestamps.
pub(crate) fn timestamp() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
}

/// Lists of non-null f32.
pub(crate) fn f32_list() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Float32, false)))
}

/// A timestamp column.
pub(crate) fn ts(values: Vec<i64>) -> ArrayRef {
    Arc::new(TimestampNanosecondArray::from(values).with_timezone("UTC"))
}

/// `rows` lists of `width` values each.
pub(crate) fn list(values: &[f32], width: usize, rows: usize) -> ArrayRef {
    let field = Arc::new(Field::new_list_field(DataType::Float32, false));
    Arc::new(ListArray::new(
        field,
        OffsetBuffer::from_lengths(std::iter::repeat_n(width, rows)),
        Arc::new(Float32Array::from(values.to_vec())),
        None,
    ))
}

/// A batch of `columns` under `schema` (they are built to match it).
pub(crate) fn record_batch(schema: SchemaRef, columns: Vec<ArrayRef>) -> RecordBatch {
    RecordBatch::try_new(schema, columns).expect("columns match the schema")
}

/// Column `name` of `batch` as array type `T`.
///
/// # Errors
/// Names the column when it is missing or of another type.
pub(crate) fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T, String> {
    let array = batch
        .column_by_name(name)
        .ok_or_else(|| format!("column {name} is missing"))?;
    array
        .as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| format!("column {name} has type {}", array.data_type()))
}

/// A nullable u64 cell.
pub(crate) fn opt_u64(a: &UInt64Array, i: usize) -> Option<u64> {
    a.is_valid(i).then(|| a.value(i))
}

/// The flat values of a list column whose rows all have one width, and that width.
///
/// # Errors
/// Names the column when it is missing, not of f32 lists, or of mixed widths.
pub(crate) fn list_values<'a>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<(&'a [f32], usize), String> {
    let l = column::<ListArray>(batch, name)?;
    let values = l
        .values()
        .as_any()
        .downcast_ref::<Float32Array>()
        .ok_or_else(|| format!("column {name} does not hold float32 lists"))?;
    let width = if l.is_empty() {
        0
    } else {
        l.value_length(0) as usize
    };
    if (0..l.len()).any(|i| l.value_length(i) as usize != width) {
        return Err(format!("column {name}: rows of different widths"));
    }
    let start = l.value_offsets()[0] as usize;
    Ok((&values.values()[start..start + width * l.len()], width))
}

/// How one sample column is held and encoded.
pub(crate) trait Codec {
    /// One value in a batch's column (a row holds `width` of them).
    type Elem: Clone;
    /// One row's value in a record.
    type Cell: Clone;
    /// Values per row, for observation width `obs_dim`.
    fn width(_obs_dim: usize) -> usize {
        1
    }
    /// Whether a record's cell fits the batch's observation width (else its length).
    fn fits(_cell: &Self::Cell, _obs_dim: usize) -> Result<(), usize> {
        Ok(())
    }
    /// Appends a record's cell to a column.
    fn push(column: &mut Vec<Self::Elem>, cell: &Self::Cell);
    /// Row `i`'s cell.
    fn cell(column: &[Self::Elem], i: usize, width: usize) -> Self::Cell;
    /// The Arrow field.
    fn field(name: &str) -> Field;
    /// The Arrow array of `rows` rows.
    fn encode(column: &[Self::Elem], rows: usize, obs_dim: usize) -> ArrayRef;
    /// The column read back, with its width where rows are lists.
    ///
    /// # Errors
    /// Names the column when it is missing or mistyped.
    fn decode(batch: &RecordBatch, name: &str) -> Result<(Vec<Self::Elem>, Option<usize>), String>;
}

/// One value per row: the cell is the value.
macro_rules! scalar_codecs {
    ($( $(#[$doc:meta])* $codec:ident: $elem:ty, $array:ty, $data_type:expr, $nullable:expr,
        |$a:ident, $i:ident| $read:expr; )*) => {$(
        $(#[$doc])*
        pub(crate) struct $codec;

        impl Codec for $codec {
            type Elem = $elem;
            type Cell = $elem;
            fn push(column: &mut Vec<$elem>, cell: &$elem) {
                column.push(cell.clone());
            }
            fn cell(column: &[$elem], i: usize, _width: usize) -> $elem {
                column[i].clone()
            }
            fn field(name: &str) -> Field {
                Field::new(name, $data_type, $nullable)
            }
            fn encode(column: &[$elem], _rows: usize, _obs_dim: usize) -> ArrayRef {
                Arc::new(<$array>::from(column.to_vec()))
            }
            fn decode(batch: &RecordBatch, name: &str) -> Result<(Vec<$elem>, Option<usize>), String> {
                let $a = column::<$array>(batch, name)?;
                Ok(((0..$a.len()).map(|$i| $read).collect(), None))
            }
        }
    )*};
}

scalar_codecs! {
    /// `u64`.
    U64: u64, UInt64Array, DataType::UInt64, false, |a, i| a.value(i);
    /// `u32`.
    U32: u32, UInt32Array, DataType::UInt32, false, |a, i| a.value(i);
    /// `f32`.
    F32: f32, Float32Array, DataType::Float32, false, |a, i| a.value(i);
    /// `bool`.
    Bool: bool, BooleanArray, DataType::Boolean, false, |a, i| a.value(i);
    /// Optional `f64` (null when absent).
    OptF64: Option<f64>, Float64Array, DataType::Float64, true, |a, i| a.is_valid(i).then(|| a.value(i));
    /// Optional `bool`.
    OptBool: Option<bool>, BooleanArray, DataType::Boolean, true, |a, i| a.is_valid(i).then(|| a.value(i));
    /// Optional text.
    OptText: Option<String>, StringArray, DataType::Utf8, true,
        |a, i| a.is_valid(i).then(|| a.value(i).to_string());
}

/// Optional values in columns added after the first ledgers were written: a file without
/// such a column reads as nulls.
macro_rules! added_codecs {
    ($( $(#[$doc:meta])* $codec:ident: $elem:ty, $array:ty, $data_type:expr,
        |$column:ident| $encode:expr, |$a:ident, $i:ident| $read:expr; )*) => {$(
        $(#[$doc])*
        pub(crate) struct $codec;

        impl Codec for $codec {
            type Elem = Option<$elem>;
            type Cell = Option<$elem>;
            fn push(column: &mut Vec<Option<$elem>>, cell: &Option<$elem>) {
                column.push(cell.clone());
            }
            fn cell(column: &[Option<$elem>], i: usize, _width: usize) -> Option<$elem> {
                column[i].clone()
            }
            fn field(name: &str) -> Field {
                Field::new(name, $data_type, true)
            }
            fn encode($column: &[Option<$elem>], _rows: usize, _obs_dim: usize) -> ArrayRef {
                Arc::new($encode)
            }
            fn decode(
                batch: &RecordBatch,
                name: &str,
            ) -> Result<(Vec<Option<$elem>>, Option<usize>), String> {
                if batch.column_by_name(name).is_none() {
                    return Ok((vec![None; batch.num_rows()], None));
                }
                let $a = column::<$array>(batch, name)?;
                Ok(((0..$a.len()).map(|$i| $a.is_valid($i).then(|| $read)).collect(), None))
            }
        }
    )*};
}

added_codecs! {
    /// Optional `u64`.
    AddedOptU64: u64, UInt64Array, DataType::UInt64,
        |c| UInt64Array::from(c.to_vec()), |a, i| a.value(i);
    /// Optional `f32`.
    AddedOptF32: f32, Float32Array, DataType::Float32,
        |c| Float32Array::from(c.to_vec()), |a, i| a.value(i);
    /// Optional text.
    AddedOptText: String, StringArray, DataType::Utf8,
        |c| c.iter().map(|v| v.as_deref()).collect::<StringArray>(), |a, i| a.value(i).to_string();
    /// Optional bytes.
    AddedOptBytes: Vec<u8>, BinaryArray, DataType::Binary,
        |c| c.iter().map(|v| v.as_deref()).collect::<BinaryArray>(), |a, i| a.value(i).to_vec();
}

/// Nanoseconds since the epoch, as a UTC timestamp.
pub(crate) struct Nanos;

impl Codec for Nanos {
    type Elem = i64;
    type Cell = i64;
    fn push(column: &mut Vec<i64>, cell: &i64) {
        column.push(*cell);
    }
    fn cell(column: &[i64], i: usize, _width: usize) -> i64 {
        column[i]
    }
    fn field(name: &str) -> Field {
        Field::new(name, timestamp(), false)
    }
    fn encode(column: &[i64], _rows: usize, _obs_dim: usize) -> ArrayRef {
        ts(column.to_vec())
    }
    fn decode(batch: &RecordBatch, name: &str) -> Result<(Vec<i64>, Option<usize>), String> {
        let a = column::<TimestampNanosecondArray>(batch, name)?;
        Ok(((0..a.len()).map(|i| a.value(i)).collect(), None))
    }
}

/// One value per observation dimension: flat in a batch, a list per row in Arrow.
pub(crate) struct ObsList;

impl Codec for ObsList {
    type Elem = f32;
    type Cell = Vec<f32>;
    fn width(obs_dim: usize) -> usize {
        obs_dim
    }
    fn fits(cell: &Vec<f32>, obs_dim: usize) -> Result<(), usize> {
        if cell.len() == obs_dim {
            Ok(())
        } else {
            Err(cell.len())
        }
    }
    fn push(column: &mut Vec<f32>, cell: &Vec<f32>) {
        column.extend_from_slice(cell);
    }
    fn cell(column: &[f32], i: usize, width: usize) -> Vec<f32> {
        column[i * width..(i + 1) * width].to_vec()
    }
    fn field(name: &str) -> Field {
        Field::new(name, f32_list(), false)
    }
    fn encode(column: &[f32], rows: usize, obs_dim: usize) -> ArrayRef {
        list(column, obs_dim, rows)
    }
    fn decode(batch: &RecordBatch, name: &str) -> Result<(Vec<f32>, Option<usize>), String> {
        let (values, width) = list_values(batch, name)?;
        Ok((values.to_vec(), Some(width)))
    }
}
