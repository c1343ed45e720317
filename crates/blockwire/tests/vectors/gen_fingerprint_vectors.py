#!/usr/bin/env python3
"""Generate fingerprint.json: test vectors for blockwire_core::fingerprint.

The Rust implementation must be byte-identical to this reference:

    def fp(fields):
        if not fields: return ""
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

Each vector is {"name", "input", "canonical", "fingerprint"}; "input" is the
fields dict itself, written with Python's json (floats in repr spelling).

Usage (stdlib only):  python3 gen_fingerprint_vectors.py
Writes fingerprint.json next to this script.
"""

import hashlib
import json
import os


def canonical(fields):
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def fp(fields):
    if not fields:
        return ""
    return hashlib.sha256(canonical(fields).encode()).hexdigest()[:16]


VECTORS = [
    ("empty", {}),
    (
        "flat_model_config",
        {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "dtype": "bfloat16",
            "num_layers": 32,
            "num_kv_heads": 8,
            "head_dim": 128,
            "block_size": 16,
            "tp_size": 1,
            "use_mla": False,
            "kv_cache_dtype": "auto",
            "sliding_window": None,
            "enable_prefix_caching": True,
        },
    ),
    (
        "nested_unsorted",
        {
            "zeta": {"b": 1, "a": {"y": [3, 2, 1], "x": {"d": None, "c": True}}},
            "alpha": {"gamma": {"z": "last", "m": "mid", "a": "first"}, "beta": 2},
            "mid": [{"b": 1, "a": 2}, {"d": {"f": 0, "e": 1}, "c": []}],
            "empty_obj": {},
            "empty_list": [],
        },
    ),
    (
        "mixed_list",
        {"items": [1, "two", 3.0, None, True, False, [4, [5, {"six": 6}]], {"k": "v"}, -7, 0.5, ""]},
    ),
    ("unicode_bmp", {"accent": "café é", "cjk": "中文 模型", "greek": "αβγ Ω", "euro": "€100", "bom": "\ufeff", "last_bmp": "\uffff"}),
    ("unicode_astral", {"emoji": "😀", "music": "𝄞", "mixed": "a😀b𝄞c", "max": "\U0010ffff", "first_astral": "\U00010000"}),
    (
        "control_chars",
        {
            "nul": "\x00",
            "soh": "\x01",
            "us": "\x1f",
            "newline": "a\nb",
            "tab": "a\tb",
            "backspace": "\b",
            "formfeed": "\f",
            "cr": "\r",
            "all_low": "".join(chr(c) for c in range(0x20)),
            "vt_esc": "\x0b\x1b",
        },
    ),
    ("del_and_c1", {"del": "\x7f", "c1": "\x80\x9f", "nbsp": "\xa0", "tilde_space": "~ "}),
    ("quotes_backslash_slash", {"quote": 'say "hi"', "backslash": "C:\\path\\to", "slash": "a/b</script>", "mix": "\\\"/\\n"}),
    ("non_ascii_keys", {"😀": 5, "中": 4, "é": 3, "a": 2, "Z": 1, "ü": 6, "\uffff": 7, "\U00010000": 8, "": 0, "\x00": -1, "\x7f": 9}),
    ("keys_needing_escape", {'q"k': 1, "b\\k": 2, "n\nk": 3, "t\tk": 4}),
    ("float_1e-05", {"x": 1e-05}),
    ("float_0.0001", {"x": 0.0001}),
    ("float_1e16", {"x": 1e16}),
    ("float_1e15", {"x": 1e15}),
    ("float_9999999999999998", {"x": 9999999999999998.0}),
    ("float_1.5e16", {"x": 1.5e16}),
    ("float_12345678901234567", {"x": 12345678901234567.0}),
    ("float_1234567890123456.7", {"x": 1234567890123456.7}),
    ("float_neg_zero", {"x": -0.0}),
    ("float_zero", {"x": 0.0}),
    ("float_one", {"x": 1.0}),
    ("float_third", {"x": 1 / 3}),
    ("float_two_thirds", {"x": 2 / 3}),
    ("float_0.1", {"x": 0.1}),
    ("float_1e22", {"x": 1e22}),
    ("float_1e-7", {"x": 1e-7}),
    ("float_123456789.123", {"x": 123456789.123}),
    ("float_max", {"x": 1.7976931348623157e308}),
    ("float_min_subnormal", {"x": 5e-324}),
    ("float_min_normal", {"x": 2.2250738585072014e-308}),
    ("float_neg_2.5e-10", {"x": -2.5e-10}),
    ("float_0.00012345", {"x": 0.00012345}),
    ("float_neg_1e-4", {"x": -0.0001}),
    ("float_1e100", {"x": 1e100}),
    ("float_100.0", {"x": 100.0}),
    ("float_0.5_neg", {"x": -0.5}),
    # Two shortest candidates equally close: Python's repr rounds half-to-even.
    ("float_tie_half_even", {"a": -1113178120592002.25, "b": 1113178120592002.75, "c": 2.0**53 + 0.0, "d": 2.0**-1074, "e": 2.0**1023}),
    ("float_list", {"xs": [1e-05, 0.0001, 1e16, 1e15, 1.5e16, -0.0, 0.0, 1.0, 1 / 3, 2 / 3, 0.1, 1e22, 1e-7, 123456789.123, 1.7976931348623157e308, 5e-324, -2.5e-10]}),
    ("learning_rate_config", {"lr": 3e-4, "eps": 1e-8, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.01, "rope_theta": 500000.0}),
    ("bigint_2_64", {"x": 2**64}),
    ("bigint_2_70", {"x": 2**70}),
    ("bigint_neg_2_70", {"x": -(2**70)}),
    ("bigint_10_30", {"x": 10**30}),
    ("bigint_u64_max", {"x": 2**64 - 1}),
    ("bigint_i64_min", {"x": -(2**63)}),
    ("int_zero", {"x": 0}),
    ("int_neg_one", {"x": -1}),
    ("int_list", {"xs": [0, -1, 1, 2**64, 2**70, -(2**70), 10**30, 2**63 - 1, -(2**63)]}),
    ("bools_and_null", {"t": True, "f": False, "n": None}),
]


def deep(depth):
    node = {"leaf": [1, 2.5, "end", None]}
    for i in range(depth):
        node = {"level": depth - i, "z_child": node, "a_sibling": [i, {"k": i}]}
    return node


VECTORS.append(("deep_nesting", deep(40)))
VECTORS.append(("deep_list_nesting", {"x": [[[[[[[[[[{"b": [], "a": {}}]]]]]]]]]]}))


def main():
    out = []
    names = set()
    for name, fields in VECTORS:
        assert name not in names, name
        names.add(name)
        out.append(
            {
                "name": name,
                "input": fields,
                "canonical": canonical(fields),
                "fingerprint": fp(fields),
            }
        )
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fingerprint.json")
    with open(path, "w", encoding="ascii") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {len(out)} vectors to {path}")


if __name__ == "__main__":
    main()
