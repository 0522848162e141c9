"""The text of what a config sets and where: `check`'s Config section, and `check --show-read`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loaderdoc.text.layout import output_width, wrap

if TYPE_CHECKING:
    from loaderdoc.checking.report import CheckReport


def config_lines(report: CheckReport) -> list[str]:
    """`check`'s Config section: the file, then each loader as judged and where its settings were read."""
    from loaderdoc.config.report import not_set_text, run_rules, value_text, where_text

    width = output_width()
    config, path = report.description, report.config_path
    loaders = report.loaders
    files = config["files"]
    inherited = f"; {len(files)} files" if len(files) > 1 else ""
    head = f"Config {path} ({config['layout']}{inherited}): "
    if not loaders:
        partial = "; read partial" if config["read"] == "partial" else ""
        return [head + f"no DataLoader settings{partial}",
                *wrap(config["no_settings"], width, first="  ", rest="    "), *_partial_lines(config, width)]
    out = [head + f"{len(loaders)} loader{'s' if len(loaders) != 1 else ''}"
           + ("; read PARTIAL" if config["read"] == "partial" else "")]
    for entry in loaders:
        read, scope = entry.described["settings"], entry.described["batch_scope"]
        kwargs = ", ".join(f"{k}={value_text(k, v, scope, getattr(entry.settings, k, None))}"
                           for k, v in read.items() if v["set_by"] is not None or v.get("run"))
        if entry.batch is not None and scope == "total":
            kwargs += f"; judged as {entry.batch} per process on this machine"
        out += wrap(kwargs or "the file sets nothing this loader could use", width,
                    first=f"  {entry.name or 'loader'} [{entry.status}]: ", rest="      ")
        if entry.unreadable:
            hint = ("; check the resolved config (tools/misc/print_config.py)" if config["layout"] == "mmengine"
                    else " (partial, below, says what decides it)")
            verb = "is" if len(entry.unreadable) == 1 else "are"
            first = "    judged without it: " if entry.judged_without_batch else "    not judged: "
            out += wrap(f"{', '.join(entry.unreadable)} {verb} worked out when the job runs{hint}", width,
                        first=first, rest="      ")
        torch_defaults, framework = not_set_text(read)
        if torch_defaults:
            out += wrap(torch_defaults, width, first="    not set: ", rest="      ")
        if framework:
            out += wrap(framework, width, first="    framework: ", rest="      ")
        rules = run_rules(read)
        if rules:
            out += wrap(rules, width, first="    the run gets: ", rest="      ")
        pairs = [f"{k} <- {where_text(v, path, with_file=False)}" for k, v in read.items()
                 if v["set_by"] is not None]
        if pairs and len("    read from: " + ", ".join(pairs)) <= width:
            out.append("    read from: " + ", ".join(pairs))
        elif pairs:  # one setting a line; a pair with its file wraps after the key, never inside a word
            out.append("    read from:")
            for pair in pairs:
                out += wrap(pair, width, first="      ", rest="          ")
    return out + _partial_lines(config, width)


def _partial_lines(config: dict, width: int) -> list[str]:

    out = []
    for reason in config["partial_reasons"]:
        out += wrap(reason, width, first="  partial: ", rest="    ")
    return out


def render_read(description: dict[str, Any], width: int) -> list[str]:
    """``--show-read``: every loader's settings, one a line, with the key, file and line that set it."""
    from loaderdoc.config.report import default_text, run_text, short_file, value_text, where_text

    path = description["path"]
    files = description["files"]
    out = [f"{path}: {description['layout']}; {len(files)} file{'s' if len(files) != 1 else ''} read, "
           f"{description['read']}"]
    for file in files[1:]:
        out.append(f"  + {short_file(file, path)}")
    if description["no_settings"]:
        out += wrap(description["no_settings"], width, first="  ", rest="    ")
    for loader in description["loaders"]:
        out.append(f"  {loader['name'] or 'loader'}:")
        for setting, entry in loader["settings"].items():
            if entry["set_by"] is not None:
                shown = f"{value_text(setting, entry, loader['batch_scope'])} <- " \
                        f"{where_text(entry, path, with_file=len(files) > 1)}"
            elif entry.get("default") == "framework":
                shown = f"not set; framework default {entry['value']!r} ({entry['default_source']})"
            else:
                shown = f"not set ({default_text(setting, entry)})"
            out += wrap(shown, width, first=f"    {setting:<23} ", rest=" " * 28)
            if "unreadable" in entry:
                out += wrap(f"not read: {entry['why']}", width, first=" " * 28, rest=" " * 28)
            if entry.get("run"):
                out += wrap(f"the run gets {run_text(entry['run'])}: {entry['run']['rule']}", width,
                            first=" " * 28, rest=" " * 28)
        for other in loader["also"]:
            out += wrap(f"also states {other}", width, first="    ", rest="      ")
    for reason in description["partial_reasons"]:
        out += wrap(reason, width, first="  partial: ", rest="    ")
    for note in description["notes"]:
        out += wrap(note, width, first="  note: ", rest="    ")
    return out
