"""Reading the project's markdown record in tests: a section's lines, to compare with what a script renders."""

from __future__ import annotations


def section_lines(text: str, title: str) -> list[str]:
    """The non-blank lines of `## title` in a markdown text, up to the next `## ` heading."""
    lines = text.splitlines()
    start = lines.index(f"## {title}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return [ln for ln in lines[start + 1 : end] if ln.strip()]
