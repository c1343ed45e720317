//! Config fingerprints that agree byte-for-byte with the Python peer.
//!
//! # Why
//!
//! Two peers exchanging KV-cache blocks must agree that they were produced
//! under the same configuration (model, dtype, layer count, block size, ...).
//! Each side condenses its configuration fields into a short *fingerprint*
//! and the peers compare those strings. One peer may be written in Rust and
//! the other in Python, so the Rust fingerprint has to be **byte-identical**
//! to this Python reference:
//!
//! ```python
//! def fp(fields):
//!     if not fields: return ""
//!     canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
//!     return hashlib.sha256(canonical.encode()).hexdigest()[:16]
//! ```
//!
//! serde_json's own serializer does not match Python's `json.dumps` (it does
//! not escape non-ASCII, spells floats differently, and does not sort unless
//! told to), so this module walks the [`Value`] tree itself.
//!
//! # Canonical JSON rules
//!
//! [`canonical_json`] reproduces
//! `json.dumps(fields, sort_keys=True, separators=(",", ":"))` with Python's
//! default `ensure_ascii=True`:
//!
//! * **Objects**: `{"k":v,...}` with no whitespace, keys sorted by Unicode
//!   code point at every depth. Python sorts `str` by code point, which is the
//!   same order as the byte order of UTF-8, i.e. Rust's `String` ordering.
//! * **Arrays**: `[a,b,...]`, element order kept.
//! * **Literals**: `null`, `true`, `false`.
//! * **Strings** (values and keys): `"` and `\` become `\"` and `\\`;
//!   `\n`, `\r`, `\t`, `\b` (U+0008), `\f` (U+000C) use their short escapes;
//!   every other character below U+0020, DEL (U+007F) and every non-ASCII
//!   character becomes `\uXXXX` with lowercase hex; characters above U+FFFF
//!   become a UTF-16 surrogate pair of two `\uXXXX` escapes. All other
//!   printable ASCII is written as-is (`/` is **not** escaped).
//! * **Integers** (a [`Number`] whose text has no `.`, `e` or `E`): printed as
//!   Python prints an `int`, i.e. the decimal digits. With serde_json's
//!   `arbitrary_precision` feature the original text is kept, so integers
//!   beyond 64 bits (e.g. `2**70`) are printed verbatim. `-0` becomes `0`
//!   (Python's `json.loads("-0")` is the int `0`).
//! * **Floats**: Python's `float.__repr__`. The number is parsed to `f64`,
//!   the shortest round-trip digits are taken, and with
//!   `decpt = exponent + 1`:
//!   * if `decpt <= -4` or `decpt > 16`: scientific, `d[.ddd]e±XX` with at
//!     least two exponent digits and no `.0` added (`1e-05`, `1e+16`,
//!     `1.5e+16`, `1.7976931348623157e+308`, `5e-324`);
//!   * otherwise fixed notation, always with a fractional part (`1.0`,
//!     `1000000000000000.0`, `0.0001`, `-0.0`).
//!
//!   "Shortest round-trip digits" means exactly what Python's `repr`
//!   (David Gay's `dtoa`, mode 0) produces: the fewest significant digits
//!   that parse back to the same `f64`, and among those the candidate
//!   closest to the exact value, ties going to an even last digit
//!   (`-1113178120592002.25` prints as `-1113178120592002.2`; Rust's own
//!   `{:e}` would give `...2.3`).
//!
//!   The input spelling does not matter: `1e-5`, `1E-5`, `0.00001` and a
//!   float built in Rust (which serde_json spells with ryu, e.g. `1e-5`) all
//!   print as `1e-05`.
//!
//! # Edge cases
//!
//! * NaN and infinities cannot be stored in a [`Value`] built from Rust
//!   floats (serde_json turns them into `null`). With `arbitrary_precision`,
//!   however, parsing JSON text such as `1e400` keeps the text; it overflows
//!   `f64` exactly as Python's `json.loads` overflows to `inf`, so it is
//!   printed the way Python's `json.dumps` prints `inf`: `Infinity` /
//!   `-Infinity`.
//! * Python strings may hold lone surrogates; Rust strings cannot, so such
//!   inputs cannot reach this function.
//! * Nothing here panics: every path returns a `String`.
//!
//! [`fingerprint`] hashes the UTF-8 bytes (which are pure ASCII) of the
//! canonical text with SHA-256 and keeps the first 16 lowercase hex digits;
//! an absent or empty field map yields the empty string, as Python's
//! `if not fields: return ""` does.

use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// Number of hex characters kept from the SHA-256 digest.
const FINGERPRINT_HEX_LEN: usize = 16;

/// The canonical JSON text of `fields`, byte-identical to Python's
/// `json.dumps(fields, sort_keys=True, separators=(",", ":"))` (with the
/// default `ensure_ascii=True`).
///
/// See the [module documentation](self) for the exact rules. The result is
/// always pure ASCII.
///
/// # Examples
///
/// ```
/// use blockwire::fingerprint::canonical_json;
///
/// fn main() -> Result<(), serde_json::Error> {
///     let fields: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
///         r#"{"z": 1e-5, "a": {"é": [1.0, 1e16, null]}, "big": 1180591620717411303424}"#,
///     )?;
///     assert_eq!(
///         canonical_json(&fields),
///         r#"{"a":{"\u00e9":[1.0,1e+16,null]},"big":1180591620717411303424,"z":1e-05}"#
///     );
///     Ok(())
/// }
/// ```
pub fn canonical_json(fields: &Map<String, Value>) -> String {
    let mut out = String::new();
    write_object(&mut out, fields);
    out
}

/// The config fingerprint: the first 16 lowercase hex characters of the
/// SHA-256 of [`canonical_json`]`(fields)`, or `""` when `fields` is `None`
/// or empty.
///
/// Matches the Python reference
/// `hashlib.sha256(canonical.encode()).hexdigest()[:16]`.
///
/// # Examples
///
/// ```
/// use blockwire::fingerprint::fingerprint;
///
/// fn main() -> Result<(), serde_json::Error> {
///     let fields: serde_json::Map<String, serde_json::Value> =
///         serde_json::from_str(r#"{"model": "m", "num_layers": 32}"#)?;
///     let fp = fingerprint(Some(&fields));
///     assert_eq!(fp.len(), 16);
///     assert!(fp.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
///
///     // Key order does not matter.
///     let reordered: serde_json::Map<String, serde_json::Value> =
///         serde_json::from_str(r#"{"num_layers": 32, "model": "m"}"#)?;
///     assert_eq!(fingerprint(Some(&reordered)), fp);
///
///     // No fields, no fingerprint.
///     assert_eq!(fingerprint(None), "");
///     assert_eq!(fingerprint(Some(&serde_json::Map::new())), "");
///     Ok(())
/// }
/// ```
pub fn fingerprint(fields: Option<&Map<String, Value>>) -> String {
    let Some(fields) = fields.filter(|f| !f.is_empty()) else {
        return String::new();
    };
    let digest = Sha256::digest(canonical_json(fields).as_bytes());
    let mut hex = hex::encode(digest);
    hex.truncate(FINGERPRINT_HEX_LEN);
    hex
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

fn write_object(out: &mut String, map: &Map<String, Value>) {
    // Sort explicitly: with serde_json's `preserve_order` feature (which some
    // other crate in the build could switch on) `Map` keeps insertion order.
    // Byte order of UTF-8 equals Python's code point order.
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push('{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, key);
        out.push(':');
        write_value(out, value);
    }
    out.push('}');
}

/// Python's `json` string encoding with `ensure_ascii=True`.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    push_u_escape(out, *unit);
                }
            }
        }
    }
    out.push('"');
}

fn push_u_escape(out: &mut String, unit: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12u32, 8, 4, 0] {
        out.push(char::from(HEX[usize::from((unit >> shift) & 0xf)]));
    }
}

fn write_number(out: &mut String, n: &Number) {
    // With `arbitrary_precision` this is the original JSON text (or ryu's /
    // itoa's spelling for numbers built in Rust).
    let text = n.to_string();
    if text.contains(['.', 'e', 'E']) {
        write_float_text(out, &text);
    } else {
        write_int_text(out, &text);
    }
}

/// Python prints ints as plain decimal digits; JSON integer text already is
/// that, except that `-0` (Python's `int("-0") == 0`) prints as `0`.
fn write_int_text(out: &mut String, text: &str) {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        // "0", "-0" (and, defensively, "00").
        out.push('0');
        return;
    }
    if negative {
        out.push('-');
    }
    out.push_str(digits);
}

fn write_float_text(out: &mut String, text: &str) {
    match text.parse::<f64>() {
        Ok(x) => write_float(out, x),
        // Unreachable for numbers produced by serde_json's parser or its
        // `From<f64>` impls; keep the text rather than panic.
        Err(_) => out.push_str(text),
    }
}

/// Python's `float.__repr__` as used by `json.dumps` (`allow_nan=True`).
fn write_float(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("NaN");
        return;
    }
    if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    let sci = shortest_scientific(x);
    let (negative, body) = match sci.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, sci.as_str()),
    };
    let Some((mantissa, exp_text)) = body.split_once('e') else {
        // Not produced by `{:e}`; fall back to the std spelling.
        out.push_str(&sci);
        return;
    };
    let Ok(exponent) = exp_text.parse::<i32>() else {
        out.push_str(&sci);
        return;
    };
    let mut digits: String = mantissa.chars().filter(|&c| c != '.').collect();
    // Python's repr never shows trailing zeros in the significand; keep one
    // digit for zero.
    while digits.len() > 1 && digits.ends_with('0') {
        digits.pop();
    }
    let ndigits = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let decpt = exponent + 1;

    if negative {
        out.push('-');
    }
    if decpt <= -4 || decpt > 16 {
        // Scientific: d[.ddd]e[+-]XX.
        let (first, rest) = digits.split_at(1.min(digits.len()));
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let sign = if exponent < 0 { '-' } else { '+' };
        // Writing to a String cannot fail.
        let _ = write!(out, "e{sign}{:02}", exponent.unsigned_abs());
    } else if decpt <= 0 {
        // 0.000ddd
        out.push_str("0.");
        for _ in 0..-decpt {
            out.push('0');
        }
        out.push_str(&digits);
    } else if decpt < ndigits {
        // ddd.ddd
        let (int_part, frac_part) = digits.split_at(usize::try_from(decpt).unwrap_or(0));
        out.push_str(int_part);
        out.push('.');
        out.push_str(frac_part);
    } else {
        // ddd000.0
        out.push_str(&digits);
        for _ in 0..(decpt - ndigits) {
            out.push('0');
        }
        out.push_str(".0");
    }
}

/// Shortest round-trip digits of a finite `x` in Rust's `{:e}` shape
/// (`"-1.2345e-7"`, `"5e-324"`, `"0e0"`, `"-0e0"`), chosen the way Python's
/// `repr` (David Gay's `dtoa` mode 0) chooses them.
///
/// Rust's `{:e}` finds the shortest digit *count* correctly, but when two
/// candidates of that length are equally close to `x` it rounds the last
/// digit half-up, whereas Python rounds half-to-even: `-1113178120592002.25`
/// is `-1113178120592002.3` in Rust and `-1113178120592002.2` in Python.
/// Rust's fixed-precision `{:.N$e}` is correctly rounded with ties to even,
/// so the digits are redone at the shortest length and kept when they still
/// round-trip (they are then the closest such string, which is what Python
/// prints); otherwise the plain shortest form is used.
fn shortest_scientific(x: f64) -> String {
    let shortest = format!("{x:e}");
    let mantissa = shortest.split('e').next().unwrap_or_default();
    let ndigits = mantissa.bytes().filter(u8::is_ascii_digit).count();
    let precision = ndigits.saturating_sub(1);
    let nearest = format!("{x:.precision$e}");
    match nearest.parse::<f64>() {
        Ok(back) if back.to_bits() == x.to_bits() => nearest,
        _ => shortest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float_text(x: f64) -> String {
        let mut out = String::new();
        write_float(&mut out, x);
        out
    }

    fn canon_value(v: Value) -> String {
        let mut out = String::new();
        write_value(&mut out, &v);
        out
    }

    fn map(json: &str) -> Map<String, Value> {
        serde_json::from_str(json).expect("test input is a JSON object")
    }

    #[test]
    fn rust_built_floats_print_python_style() {
        let cases: &[(f64, &str)] = &[
            (1e-5, "1e-05"),
            (1e-4, "0.0001"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e16, "1.5e+16"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (1.0, "1.0"),
            (1.0 / 3.0, "0.3333333333333333"),
            (2.0 / 3.0, "0.6666666666666666"),
            (0.1, "0.1"),
            (1e22, "1e+22"),
            (1e-7, "1e-07"),
            (123456789.123, "123456789.123"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (-2.5e-10, "-2.5e-10"),
            (100.0, "100.0"),
            (1e100, "1e+100"),
            (0.00012345, "0.00012345"),
            (9999999999999998.0, "9999999999999998.0"),
            (12345678901234567.0, "1.2345678901234568e+16"),
            (1234567890123456.7, "1234567890123456.8"),
            (3e-4, "0.0003"),
            (500000.0, "500000.0"),
            // Exactly -1113178120592002.25 and 1113178120592002.75: ties between
            // two 17-digit candidates, which Python rounds half-to-even.
            (-4_452_712_482_368_009.0 / 4.0, "-1113178120592002.2"),
            (4_452_712_482_368_011.0 / 4.0, "1113178120592002.8"),
        ];
        for &(x, want) in cases {
            // Through serde_json's From<f64> (ryu spelling under arbitrary_precision).
            assert_eq!(canon_value(Value::from(x)), want, "Value::from({x:?})");
            // Directly.
            assert_eq!(float_text(x), want, "write_float({x:?})");
        }
    }

    #[test]
    fn rust_built_float_in_map() {
        let mut fields = Map::new();
        fields.insert("lr".to_owned(), Value::from(1e-5_f64));
        fields.insert("eps".to_owned(), Value::from(1e-8_f32));
        fields.insert("n".to_owned(), Value::from(7_u64));
        fields.insert("m".to_owned(), Value::from(-7_i64));
        // Under `arbitrary_precision`, `Value::from(f32)` stores ryu's *f32*
        // spelling ("1e-8"), not the widened f64 9.99999993922529e-09, so the
        // number means 1e-8 and prints as Python's repr(1e-8).
        assert_eq!(
            canonical_json(&fields),
            r#"{"eps":1e-08,"lr":1e-05,"m":-7,"n":7}"#
        );
    }

    #[test]
    fn non_finite_rust_floats_become_null() {
        // serde_json maps NaN/inf to null, so they never reach write_float.
        assert_eq!(canon_value(Value::from(f64::NAN)), "null");
        assert_eq!(canon_value(Value::from(f64::INFINITY)), "null");
    }

    #[test]
    fn float_spellings_normalise() {
        let fields = map(
            r#"{"a": 1E-5, "b": 0.00001, "c": 1.0e+2, "d": 1e2, "e": -0.0, "f": 1e400, "g": -1e400, "h": 1e-400}"#,
        );
        assert_eq!(
            canonical_json(&fields),
            r#"{"a":1e-05,"b":1e-05,"c":100.0,"d":100.0,"e":-0.0,"f":Infinity,"g":-Infinity,"h":0.0}"#
        );
    }

    #[test]
    fn integers() {
        let fields =
            map(r#"{"a": -0, "b": 0, "c": 18446744073709551616, "d": -1180591620717411303424}"#);
        assert_eq!(
            canonical_json(&fields),
            r#"{"a":0,"b":0,"c":18446744073709551616,"d":-1180591620717411303424}"#
        );
    }

    #[test]
    fn strings_escape_like_python() {
        let fields = map(r#"{"s": "\"\\/\n\r\t\b\f\u0000\u001f\u007f é中😀 ~"}"#);
        assert_eq!(
            canonical_json(&fields),
            r#"{"s":"\"\\/\n\r\t\b\f\u0000\u001f\u007f \u00e9\u4e2d\ud83d\ude00 ~"}"#
        );
    }

    #[test]
    fn keys_sorted_by_code_point() {
        let fields = map(r#"{"😀": 5, "中": 4, "\uffff": 6, "é": 3, "a": 2, "Z": 1}"#);
        assert_eq!(
            canonical_json(&fields),
            r#"{"Z":1,"a":2,"\u00e9":3,"\u4e2d":4,"\uffff":6,"\ud83d\ude00":5}"#
        );
    }

    #[test]
    fn empty_gives_empty_fingerprint() {
        assert_eq!(fingerprint(None), "");
        assert_eq!(fingerprint(Some(&Map::new())), "");
        assert_eq!(canonical_json(&Map::new()), "{}");
    }

    #[test]
    fn fingerprint_is_16_lower_hex() {
        let fp = fingerprint(Some(&map(r#"{"x": 1}"#)));
        assert_eq!(fp.len(), 16);
        assert!(fp.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    }
}
