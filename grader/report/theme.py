"""The report card as an HTML page that reads well in light and in dark mode.

rich exports a recorded console with one terminal theme; its default is a dark terminal's
palette on white (bright green rules). Here the card is exported twice, with a light and
a dark palette, as CSS classes; the dark classes apply under `prefers-color-scheme: dark`.
Every text colour is then moved toward the foreground until it has a contrast of at
least 4.5:1 (WCAG AA for text) with its background: rich's "dim" blends a colour halfway
to the background, which no palette keeps readable on white.
"""

from __future__ import annotations

import functools
import html
import re

from rich.console import Console
from rich.terminal_theme import TerminalTheme

AA = 4.5  # WCAG 2 AA contrast for ordinary text

LIGHT = TerminalTheme(
    (255, 255, 255),
    (27, 27, 27),
    [(28, 28, 28), (179, 38, 30), (27, 110, 32), (122, 92, 0),
     (10, 85, 199), (142, 36, 170), (0, 112, 122), (84, 84, 84)],
    [(85, 85, 85), (180, 38, 30), (27, 111, 32), (122, 93, 0),
     (10, 86, 199), (142, 37, 170), (0, 113, 122), (0, 0, 0)],
)  # fmt: skip
DARK = TerminalTheme(
    (18, 19, 22),
    (230, 230, 230),
    [(179, 179, 179), (255, 156, 143), (129, 201, 149), (253, 214, 99),
     (143, 184, 255), (215, 174, 251), (120, 217, 236), (230, 230, 230)],
    [(179, 179, 179), (255, 156, 143), (129, 201, 149), (253, 214, 99),
     (143, 184, 255), (215, 174, 251), (120, 217, 236), (255, 255, 255)],
)  # fmt: skip

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
:root {{ color-scheme: light dark; }}
body {{ margin: 1.5rem; color: {foreground}; background: {background};
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }}
a {{ color: #0a55c7; }}
pre {{ font-family: ui-monospace, Menlo, "DejaVu Sans Mono", Consolas, monospace;
  overflow-x: auto; }}
{light}
@media (prefers-color-scheme: dark) {{
body {{ color: {dark_foreground}; background: {dark_background}; }}
a {{ color: #8fb8ff; }}
{dark}
}}
</style>
</head>
<body>
{links}
<pre><code>{code}</code></pre>
</body>
</html>
"""


def card_page(console: Console, title: str, links: str) -> str:
    """The page of a card recorded on `console` (`record=True`); `title` is text, `links`
    HTML. The console's record is kept."""
    stylesheet = _export(console, "{stylesheet}")
    fields = {
        "title": html.escape(title),
        "links": links,
        "dark_foreground": _hex(DARK.foreground_color),
        "dark_background": _hex(DARK.background_color),
        "dark": readable(in_dark(stylesheet), DARK),
    }
    template = _PAGE
    for name, value in fields.items():  # rich formats the rest: braces doubled
        template = template.replace("{" + name + "}", value.replace("{", "{{").replace("}", "}}"))
    page = _export(console, template.replace("{light}", "{stylesheet}"))
    return page.replace(stylesheet, readable(stylesheet, LIGHT), 1)


def _export(console: Console, template: str) -> str:
    return console.export_html(theme=LIGHT, inline_styles=False, code_format=template, clear=False)


def _palette(theme: TerminalTheme) -> list[tuple[int, ...]]:
    return [
        theme.foreground_color, theme.background_color,
        *(tuple(theme.ansi_colors[i]) for i in range(16)),
    ]  # fmt: skip


@functools.cache
def _to_dark() -> dict[str, str]:
    """The light palette's colours (all distinct), each to the dark palette's in its place."""
    pairs = zip(_palette(LIGHT), _palette(DARK), strict=True)
    return {_hex(light): _hex(dark) for light, dark in pairs}


def in_dark(stylesheet: str) -> str:
    """The light `stylesheet` with each palette colour swapped for the dark palette's;
    other colours (rich's dim blends) are left for `readable`."""
    return re.sub(r"#[0-9a-f]{6}", lambda m: _to_dark().get(m.group(), m.group()), stylesheet)


_RULE = re.compile(r"\{([^}]*)\}")
_COLOR = re.compile(r"(?<![-\w])color: #([0-9a-fA-F]{6})")
_BACKGROUND = re.compile(r"background-color: #([0-9a-fA-F]{6})")


def readable(stylesheet: str, theme: TerminalTheme) -> str:
    """`stylesheet` (rich's classes) with each text colour moved toward the theme's
    foreground until it has `AA` contrast with its background (the rule's own, or the
    theme's)."""

    def fix(rule: re.Match[str]) -> str:
        body = rule.group(1)
        background = _BACKGROUND.search(body)
        behind = _rgb(background.group(1)) if background else theme.background_color
        color = _COLOR.search(body)
        if color is None:
            return rule.group(0)
        fixed = _hex(_with_contrast(_rgb(color.group(1)), behind))
        body = re.sub(
            r"(?<![-\w])(color|text-decoration-color): #[0-9a-fA-F]{6}", rf"\1: {fixed}", body
        )
        return "{" + body + "}"

    return _RULE.sub(fix, stylesheet)


def _with_contrast(color: tuple[int, int, int], behind: tuple[int, int, int]) -> tuple[int, ...]:
    """`color`, or the first colour toward black or white (whichever contrasts more with
    `behind`) whose contrast with `behind` is at least AA."""
    target = (0, 0, 0) if luminance(behind) > 0.18 else (255, 255, 255)
    for step in range(21):
        t = step / 20
        mixed = tuple(round(c + (g - c) * t) for c, g in zip(color, target, strict=True))
        if contrast(mixed, behind) >= AA:
            return mixed
    return target


def luminance(rgb: tuple[int, ...]) -> float:
    """WCAG 2's relative luminance of an sRGB colour."""

    def channel(value: int) -> float:
        c = value / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(v) for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """WCAG 2's contrast ratio of two colours (1 to 21)."""
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _rgb(text: str) -> tuple[int, int, int]:
    return int(text[0:2], 16), int(text[2:4], 16), int(text[4:6], 16)


def _hex(rgb: tuple[int, ...]) -> str:
    return "#" + "".join(f"{v:02x}" for v in rgb)
