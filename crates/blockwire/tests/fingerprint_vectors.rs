//! Cross-language vectors: `tests/vectors/fingerprint.json` is produced by
//! `tests/vectors/gen_fingerprint_vectors.py` (the Python reference); the Rust
//! fingerprint must match it byte for byte.

use blockwire::fingerprint::{canonical_json, fingerprint};
use serde_json::Value;

const VECTORS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/vectors/fingerprint.json"
));

fn field<'a>(vector: &'a Value, key: &str, name: &str) -> &'a Value {
    vector
        .get(key)
        .unwrap_or_else(|| panic!("vector {name:?} has no {key:?}"))
}

#[test]
fn python_vectors_match() {
    let vectors: Vec<Value> = serde_json::from_str(VECTORS).expect("fingerprint.json parses");
    assert!(
        vectors.len() >= 40,
        "expected many vectors, got {}",
        vectors.len()
    );
    for vector in &vectors {
        let name = vector
            .get("name")
            .and_then(Value::as_str)
            .expect("every vector has a string name");
        let input = field(vector, "input", name)
            .as_object()
            .unwrap_or_else(|| panic!("vector {name:?}: input is not an object"));
        let want_canonical = field(vector, "canonical", name)
            .as_str()
            .unwrap_or_else(|| panic!("vector {name:?}: canonical is not a string"));
        let want_fp = field(vector, "fingerprint", name)
            .as_str()
            .unwrap_or_else(|| panic!("vector {name:?}: fingerprint is not a string"));

        assert_eq!(
            canonical_json(input),
            want_canonical,
            "canonical_json mismatch for vector {name:?}"
        );
        assert_eq!(
            fingerprint(Some(input)),
            want_fp,
            "fingerprint mismatch for vector {name:?}"
        );
    }
}

#[test]
fn empty_vector_has_empty_fingerprint() {
    let vectors: Vec<Value> = serde_json::from_str(VECTORS).expect("fingerprint.json parses");
    let empty = vectors
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some("empty"))
        .expect("an \"empty\" vector exists");
    assert_eq!(field(empty, "fingerprint", "empty").as_str(), Some(""));
    assert_eq!(fingerprint(None), "");
}
