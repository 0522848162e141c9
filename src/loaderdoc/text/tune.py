"""`loaderdoc tune`'s text (and the app's without a terminal): the training loader, the trials,
why each was run, each rank's rate, the pick and why."""

from __future__ import annotations

import shlex

from loaderdoc.base.units import cpus_text, fmt_bytes, fmt_share


def render(report) -> str:
    out = [f"loaderdoc tune: {shell(report.command)}"]
    loader = report.loader or {}
    if loader:
        site = report.loader_site
        where = site or loader.get("role") or "loader"
        if loader.get("role") and site:
            where += f" ({loader['role']})"
        asked = loader.get("asked") or loader.get("settings") or {}
        out.append(f"training loader: {where} ({loader.get('class') or 'DataLoader'}, batch_size="
                   f"{asked.get('batch_size')}); {cpus_text(report.cpu_budget) if report.cpu_budget else 'unknown CPUs'} per rank")
    if report.busy:
        out.append(f"busy machine: {busy_text(report)}")
    out.append("")
    out.append(f"{'trial':<6}{'workers':>7}{'prefetch':>9}{'steps/s':>9}{'predicted':>10}{'wait':>6}{'step ms':>9}"
               f"{'workers mem':>13}")
    for t in report.trials:
        workers, pf = t.columns()
        if t.ok:
            out.append(f"{t.number:<6}{workers:>7}{pf:>9}{t.steps_per_s:>9.1f}"
                       f"{(f'{t.predicted_per_s:.1f}' if t.predicted_per_s else '-'):>10}{fmt_share(t.wait_share):>6}"
                       f"{(f'{t.step_ms:.1f}' if t.step_ms is not None else '-'):>9}"
                       f"{(fmt_bytes(t.workers_pss_bytes) if t.workers_pss_bytes else '-'):>13}")
        else:
            out.append(f"{t.number:<6}{workers:>7}{pf:>9}  {t.status}: {t.reason or ''}")
    if any(t.settings.persistent for t in report.trials):
        out.append("(p: persistent_workers=True)")
    out.append("")
    out.append("why each trial:")
    for t in report.trials:
        out.append(f"  {t.number}: {t.purpose}")
    ranked = [t for t in report.trials if len(t.ranks) > 1]
    if ranked:
        out.append("")
        out.append(f"each trial's rate is its slowest rank's ({len(ranked[0].ranks)} ranks on this node):")
        for t in ranked:
            rates = ", ".join(f"rank {r.rank if r.rank is not None else '?'} {r.steps_per_s:.1f}"
                              for r in sorted(t.ranks, key=lambda r: r.steps_per_s))
            out.append(f"  trial {t.number}: {rates}")
    out.append("")
    pick = report.pick
    if pick is None:
        out.append(f"no pick: {report.no_pick_reason}")
    else:
        out.append(f"pick: {pick.headline()}")
        out.append(f"why: {pick.reason}")
        if pick.gain is not None:
            out.append(f"gain over your settings: {pick.gain:.2f}x ({pick.verdict})")
        out.append(f"noise: {noise_text(report)}")
        for key, why in pick.excluded.items():
            out.append(f"not picked: {key}: {why}")
    for note in report.notes:
        out.append(f"note: {note}")
    out.append(f"{len(report.trials)} trials in {report.elapsed_s:.0f} s; {report.stopped_text}")
    return "\n".join(out) + "\n"


def busy_text(report) -> str:
    """What other processes took of the CPUs during the trials (a busy report's)."""
    lo, hi = report.others_cpus
    used = f"{lo:.1f}-{hi:.1f}" if hi - lo >= 0.05 else f"{hi:.1f}"
    return (f"other processes used {used} of the {cpus_text(report.cpu_budget)} during the trials: every rate "
            "below was measured beside that load")


def noise_text(report) -> str:
    """The noise the trials showed (between repeats, or within a run) and what a gain must clear."""
    pick = report.pick
    if pick.repeated:
        again = ", ".join(str(n) for n in pick.repeated)
        basis = f"your settings and the pick measured again (trial{'s' if len(pick.repeated) > 1 else ''} {again})"
    elif any(t.ok and t.spread is not None for t in report.trials):
        basis = "no configuration measured twice: from each run's two halves"
    else:  # a report written before the windows' spread was recorded: nothing to say it from
        return f"not measured (no configuration measured twice, no window's halves recorded); a gain must clear {pick.tolerance:.0%}"
    return f"+/-{pick.noise:.0%}, {basis}; a gain must clear {max(pick.tolerance, pick.noise):.0%}"


def shell(command: list[str]) -> str:
    """The command as a shell would take it back."""
    return shlex.join(command)
