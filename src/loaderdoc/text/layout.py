"""Plain-text layout for the commands' reports: the output width, wrapping that keeps file paths
whole where they fit (and breaks them only after a ``/`` where they do not), and tables that split
into parts, never truncating a cell, when they are wider than the terminal.

No torch, no textual, no rich: `facts` and `tradeoffs` stay fast and print the same to a pipe.
"""

from __future__ import annotations

MIN_WIDTH, MAX_WIDTH = 60, 120
LAST_MIN = 12  # table_lines(wrap_last=True): the narrowest the free-text column is wrapped to


def output_width() -> int:
    """``$COLUMNS`` or the terminal's width (80 for a pipe), kept within 60..120 columns."""
    from loaderdoc.base.output import stdout_columns

    return max(MIN_WIDTH, min(MAX_WIDTH, stdout_columns(80)))


def _pieces(word: str, room: int) -> list[str]:
    """A word longer than ``room`` in pieces of at most ``room``, each ending after a ``/`` where
    the word has one in reach (a path breaks between its folders), else cut at ``room``."""
    out = []
    while len(word) > room:
        cut = word.rfind("/", 0, room) + 1
        if cut <= 0:
            cut = room
        out.append(word[:cut])
        word = word[cut:]
    return out + [word] if word else out


def wrap(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """``text`` in lines of at most ``width`` columns: the first starts with ``first``, the others
    with ``rest`` (default: spaces as wide as ``first``). Words are kept whole when they fit a
    line; nothing is dropped."""
    rest = " " * len(first) if rest is None else rest
    room = max(8, width - max(len(first), len(rest)))
    lines: list[str] = []
    line = ""
    for word in text.split():
        for i, piece in enumerate(_pieces(word, room)):
            glue = "" if (i or not line) else " "
            if line and len(line) + len(glue) + len(piece) > room:
                lines.append(line)
                line = piece
            else:
                line += glue + piece
    lines.append(line)
    return [(first if i == 0 else rest) + part for i, part in enumerate(lines)]


def table_lines(header: list[str], rows: list[list[str]], marks: list[str], width: int,
                indent: str = "  ", *, right: frozenset[int] | set[int] = frozenset(),
                wrap_last: bool = False) -> list[str]:
    """A table as text lines of at most ``width`` columns. ``marks`` (one per row, all the same
    width) lead each row. A table too wide is split into parts that each repeat the first column;
    a column too wide even alone beside it has its cells wrapped over lines. With ``wrap_last``
    the last column (free text) takes the room the others leave and wraps there, rather than
    starting a part of its own, while that room is at least ``LAST_MIN`` columns. Columns in
    ``right`` (indexes) are aligned to the right, numbers under their header."""
    mark_w = len(marks[0]) if marks else 0
    room = width - len(indent) - mark_w
    natural = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def span(cols: list[int]) -> int:
        return sum(natural[c] for c in cols) + 2 * (len(cols) - 1)

    last = len(header) - 1
    parts: list[list[int]] = []
    part = [0]
    for c in range(1, len(header)):
        squeezed = wrap_last and c == last and span(part) + 2 + min(natural[c], LAST_MIN) <= room
        if len(part) > 1 and span(part + [c]) > room and not squeezed:
            parts.append(part)
            part = [0]
        part.append(c)
    parts.append(part)
    out: list[str] = []
    for n, cols in enumerate(parts):
        widths = [natural[c] for c in cols]
        over = sum(widths) + 2 * (len(cols) - 1) - room
        if over > 0:  # one wide column beside the first: wrap its cells
            widths[-1] = max(8, widths[-1] - over)
        if n:
            out.append("")
        for mark, cells in zip([" " * mark_w] + marks, [header] + rows, strict=True):
            wrapped = [wrap(cells[c], w) for c, w in zip(cols, widths, strict=True)]
            for i in range(max(len(w) for w in wrapped)):
                text = "  ".join(_align(w[i] if i < len(w) else "", wd, c in right)
                                 for c, w, wd in zip(cols, wrapped, widths, strict=True))
                out.append((indent + (mark if i == 0 else " " * mark_w) + text).rstrip())
    return out


def _align(text: str, width: int, right: bool) -> str:
    return text.rjust(width) if right else text.ljust(width)
