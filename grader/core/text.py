"""Candidate text made safe for each output: the terminal, XML and JSON.

Whatever a candidate's code raises or prints reaches the report: messages, cell output,
the guard's findings. It may hold rich markup (`[/x]`), terminal escapes, NUL bytes or
lone surrogates (which JSON can carry and UTF-8 cannot encode). Each writer passes it
through one of these, so it is shown as the characters it is and never acted on.
"""

from __future__ import annotations

import re

# Characters that reorder or hide text: the bidirectional embeddings, overrides and
# isolates and the marks (a candidate's message must read as it is stored, "Trojan
# Source"), zero-width characters, the line and paragraph separators, the BOM.
_INVISIBLE = "\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"
# C0 controls but tab and newline, DEL, C1 controls, lone surrogates, the invisible ones.
_UNPRINTABLE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff{_INVISIBLE}]")
# What XML 1.0 forbids (tab, newline and carriage return are allowed), plus DEL and the
# C1 controls, which it discourages, and the invisible ones.
_NOT_XML = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff{_INVISIBLE}]")
# Code points UTF-8 cannot encode.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character but tab and newline, every lone surrogate and
    every character that reorders or hides text (bidi overrides, zero-width characters),
    written as an escape (`\\x1b`, `\\udc80`, `\\u202e`): safe to print to a terminal,
    and read as it is stored."""
    return _UNPRINTABLE.sub(_escape, text)


def xml_safe(text: str) -> str:
    """`text` with the characters XML 1.0 forbids (and DEL and the C1 controls, which it
    discourages) written as escapes: well-formed in any attribute or element text."""
    return _NOT_XML.sub(_escape, text)


def encodable(text: str) -> str:
    """`text` with lone surrogates written as escapes: it encodes to UTF-8."""
    return _SURROGATE.sub(_escape, text)
