"""The check every bad-input test makes: exactly one ``edgekit: error:`` line, no traceback."""
from __future__ import annotations


def one_line_error(returncode: int, output: str, expected_code: int = 2, *fragments: str) -> str:
    """Assert ``output`` is one error line with ``expected_code`` holding every fragment; the
    line."""
    assert returncode == expected_code, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgekit: error:"), output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
