"""The README's Python example runs as printed."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
START = "```python\n"


def test_readme_python_example_runs():
    text = README.read_text()
    at = text.index(START + "import numpy as np\nfrom blockwire import P2PTransport")
    code = text[at + len(START) : text.index("```", at + len(START))]
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)
    assert (scope["decode_mem"][[7, 8]] == scope["np"].zeros((2, 65536), "u1")).all()
    scope["prefill"].close()
    scope["decode"].close()
