"""Human-readable numbers for reports."""

from __future__ import annotations


def fmt_bytes(n: int | float | None) -> str:
    """1536 -> '1.5 KiB'; None -> 'unknown'."""
    if n is None:
        return "unknown"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def fmt_cpus(n: float | None) -> str:
    if n is None:
        return "unknown"
    return f"{n:g}"
