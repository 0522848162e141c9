"""`loaderdoc facts` (text) says where every value was read from, within 80 columns; --json is the
recordable fixture, unchanged."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from faults_support import fault_env, loaderdoc

from loaderdoc.base.errors import EXIT_OK
from loaderdoc.system.facts import MachineFacts, Reading
from loaderdoc.system.fixtures import load_machine, machine_names
from loaderdoc.text.layout import table_lines, wrap
from loaderdoc.text.machine import reading_sections, render_facts


def squeezed(text: str) -> str:
    """Text with all whitespace removed: a wrapped source reads the same as the one-line original."""
    return re.sub(r"\s+", "", text)


def readings(tree: dict, path: str = ""):
    """(dotted path, reading dict) for every reading in a `facts --json` document."""
    for key, value in tree.items():
        where = f"{path}.{key}" if path else key
        if isinstance(value, dict) and set(value) == {"value", "source", "unknown"}:
            yield where, value
        elif isinstance(value, dict):
            yield from readings(value, where)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    yield from readings(item, f"{where}[{i}]")


def columns_env(width: int = 80) -> dict:
    env, _ = fault_env({"COLUMNS": str(width)})
    return env


def test_this_machine_every_source_and_reason_is_shown_within_80_columns():
    env = columns_env()
    proc = loaderdoc("facts", env=env)
    assert proc.returncode == EXIT_OK, proc.stderr
    doc = json.loads(loaderdoc("facts", "--json", env=env).stdout)
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert lines[0].startswith("CPU ")  # the summary still comes first
    text = squeezed(proc.stdout)
    found = list(readings(doc))
    assert len(found) >= 35  # every section (38 readings without a GPU), not a sample
    for where, reading in found:
        assert reading["source"], where  # detect() records a source for every reading
        assert squeezed("<- " + reading["source"]) in text, where
        if reading["unknown"] is not None:
            assert squeezed("unknown: " + reading["unknown"]) in text, where


@pytest.mark.parametrize("name", machine_names())
def test_recorded_machines_every_reading_on_its_line(name):
    facts = load_machine(name)
    lines = render_facts(facts, 80).splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    sections = reading_sections(facts)
    assert [title for title, _ in sections] == (
        ["CPU", "Memory", "/dev/shm", "Limits", "GPU"] + [f"GPU {d.index}" for d in facts.gpu.devices]
        + ["torch", "Distributed", "Container", "Platform"])
    for title, rows in sections:
        at = lines.index(title)
        for reading_name, value, reading in rows:
            at = next(n for n in range(at + 1, len(lines)) if re.match(rf"  {reading_name} +\S", lines[n]))
            end = next((n for n in range(at + 1, len(lines)) if not lines[n] or re.match(r"  \S", lines[n])),
                       len(lines))
            block = squeezed(" ".join(lines[at:end]))  # the reading's line and what is wrapped under it
            assert block.startswith(squeezed(reading_name + value)), (title, reading_name, value)
            assert block.endswith(squeezed("<- " + reading.source)), (title, reading_name, reading.source)


def test_an_unknown_reading_shows_its_reason_through_the_command(tmp_path):
    facts = load_machine("k8s-4cpu-quota")
    facts.cpu.cgroup_quota = Reading.missing("permission denied: /sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu.max")
    facts.memory.cgroup_limit = Reading.missing("no such file", "/sys/fs/cgroup/memory.max")
    machine = tmp_path / "box.json"
    machine.write_text(facts.to_json())
    proc = loaderdoc("facts", "--machine", str(machine), env=columns_env())
    assert proc.returncode == EXIT_OK, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    quota = next(n for n, line in enumerate(lines) if line.startswith("  cgroup_quota "))
    assert "unknown: permission denied: /sys/fs/cgroup/cpu.max" in lines[quota]
    assert "<- /sys/fs/cgroup/cpu.max" in " ".join(lines[quota:quota + 2])
    assert re.search(r"^  cgroup_limit +unknown: no such file +<- /sys/fs/cgroup/memory\.max$", proc.stdout, re.M)


def test_a_long_path_breaks_after_a_slash_and_nothing_is_lost():
    facts = load_machine("ci-2core")
    deep = "/sys/fs/cgroup/" + "/".join(f"kubepods-burstable-pod{i}e0c8c1a2b3c4d5e6f7.slice" for i in range(3))
    facts.memory.cgroup_limit = Reading.of(None, f"{deep}/memory.max: unlimited (checked 3 level(s) up)")
    lines = render_facts(facts, 80).splitlines()
    assert max(len(line) for line in lines) <= 80
    start = next(n for n, line in enumerate(lines) if line.startswith("  cgroup_limit "))
    source_lines = lines[start + 1:start + 6]
    assert source_lines[0].lstrip().startswith("<- /sys/fs/cgroup/")
    path_lines = [line.strip() for line in source_lines if "kubepods" in line]
    assert len(path_lines) >= 2 and all(line.endswith("/") for line in path_lines[:-1])  # broken only after a /
    assert squeezed(f"<- {deep}/memory.max: unlimited") in squeezed(" ".join(source_lines))


def test_facts_json_is_unchanged():
    proc = loaderdoc("facts", "--json", "--machine", "h100x8-node")
    assert proc.returncode == EXIT_OK, proc.stderr
    assert proc.stdout == load_machine("h100x8-node").to_json() + "\n"
    assert MachineFacts.from_json(proc.stdout) == load_machine("h100x8-node")


def test_every_reading_of_the_facts_tree_is_in_a_section():
    facts = load_machine("laptop-rtx3050")
    # recorded before torch's thread count was read: the JSON leaves that reading out, the text lists it
    facts.torch.intra_op_threads = Reading.of(4, "OMP_NUM_THREADS=4")
    listed = sum(len(rows) for _, rows in reading_sections(facts))
    count = sum(1 for _ in readings(facts.to_dict()))
    assert listed == count
    fields = [f.name for f in dataclasses.fields(facts.cpu) if isinstance(getattr(facts.cpu, f.name), Reading)]
    assert [name for name, _, _ in reading_sections(facts)[0][1]] == fields


# ---- the layout helpers -----------------------------------------------------------------------
def test_wrap_keeps_words_whole_and_indents():
    text = "raise it and the step waits less, at /sys/fs/cgroup/cpu.max " * 4
    lines = wrap(text, 40, "  raise: ", "    ")
    assert all(len(line) <= 40 for line in lines) and len(lines) > 4
    assert lines[0].startswith("  raise: raise") and all(line.startswith("    ") for line in lines[1:])
    words = " ".join(line.removeprefix("  raise: ") for line in lines).split()
    assert words == text.split()  # every word whole, in order, nothing dropped


def test_table_splits_repeating_the_first_column_and_never_cuts_a_cell():
    header = ["num_workers", "batches/s", "step waits", "worker PSS", "CPUs used / per rank",
              "/dev/shm in flight", "fits /dev/shm"]
    rows = [[str(n), f"{n * 10.5:.1f}", f"{100 - n}%", f"{n * 103} MiB", f"{n + 1} / 224",
             f"2 x {n} x 9.2 MiB x 8 ranks = {n * 147} MiB", "yes"] for n in (0, 1, 16, 128)]
    marks = [" *", ">*", "  ", "  "]
    lines = table_lines(header, rows, marks, 80)
    assert max(len(line) for line in lines) <= 80
    assert "" in lines  # more than one part
    parts = "\n".join(lines).split("\n\n")
    for part in parts:
        assert part.splitlines()[0].split()[0] == "num_workers"  # each part keys its rows
    for row in rows:
        for cell in row:
            assert cell in "\n".join(lines), cell  # whole, on one line: nothing cut
    assert sum(line.startswith("  >*") for line in lines) == len(parts)
    # a table that fits is left as one
    narrow = table_lines(header[:3], [r[:3] for r in rows], marks, 80)
    assert "" not in narrow and len(narrow) == len(rows) + 1
