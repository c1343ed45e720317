//! Block index lists from Python: a list, a tuple, a numpy array, any iterable of ints.
//! Lists and tuples are read in place; a numpy array through its `tolist`.

use blockwire::BlockIndex;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::errors::raise;

fn one(item: &Bound<'_, PyAny>, which: &str, at: usize) -> PyResult<BlockIndex> {
    let py = item.py();
    let out_of_range = |shown: String| {
        raise(
            py,
            "InvalidTransferError",
            &format!("{which}_index_out_of_range"),
            format!("{which} block index {shown} (position {at}) is not a block index"),
        )
    };
    // `__index__` semantics: ints and numpy integers, not floats or strings.
    match item.extract::<i64>() {
        Ok(i) => BlockIndex::try_from(i).map_err(|_| out_of_range(i.to_string())),
        Err(_) => Err(out_of_range(
            item.repr().map(|r| r.to_string()).unwrap_or_default(),
        )),
    }
}

fn all<'py>(
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    which: &str,
) -> PyResult<Vec<BlockIndex>> {
    items
        .enumerate()
        .map(|(at, i)| one(&i, which, at))
        .collect()
}

/// The indices in `list`; `which` ("local" or "remote") names it in errors.
pub(crate) fn extract(list: &Bound<'_, PyAny>, which: &str) -> PyResult<Vec<BlockIndex>> {
    if let Ok(l) = list.cast::<PyList>() {
        return all(l.iter(), which);
    }
    if let Ok(t) = list.cast::<PyTuple>() {
        return all(t.iter(), which);
    }
    // A numpy array (or anything with `tolist`): one call in C gives Python ints, several
    // times cheaper than iterating numpy scalars one by one.
    if let Ok(tolist) = list.getattr(pyo3::intern!(list.py(), "tolist")) {
        if let Ok(items) = tolist.call0() {
            if let Ok(l) = items.cast::<PyList>() {
                return all(l.iter(), which);
            }
        }
    }
    let Ok(items) = list.try_iter() else {
        return Err(raise(
            list.py(),
            "InvalidTransferError",
            "not_a_list",
            format!("{which} block indices must be a list of ints"),
        ));
    };
    items
        .enumerate()
        .map(|(at, i)| one(&i?, which, at))
        .collect()
}
