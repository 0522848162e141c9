"""Writing a file the user named without ever losing what was there.

A regular file is written to a temporary sibling and renamed into place, so a failure never
leaves a half-written file, and an existing file is replaced only with ``force``. A character
device or a pipe (``/dev/null``, ``/dev/stdout``, a FIFO) is *written to*, not replaced: renaming
over it would swap the device node for a regular file (as root nothing stops that). Anything else
(a directory, a block device, a socket) is refused before any work is done.

A new file is created 0600 (owner only), whatever the umask: reports, ``--fixes`` files and exports
can carry the command line (``--token=...``), dataset names and paths. ``--force`` over an existing
file keeps that file's mode: whoever widened it meant to share it.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import tempfile
from pathlib import Path

from loaderdoc.base.errors import ExportError
from loaderdoc.base.visible import encodable

# paths that name an open descriptor, whatever it is (a pipe, a terminal, a file the shell opened)
_DESCRIPTOR_PATH = re.compile(r"^/(dev/(stdout|stderr|fd/\d+)|proc/(self|\d+)/fd/\d+)$")
_STDOUT_PATHS = {"/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"}
# room mkstemp needs around the target's name in a temporary sibling: "." + name + "." + 8 + ".tmp"
_TEMP_NAME_KEEP = 64
NEW_FILE_MODE = 0o600


def is_stream(target: Path) -> bool:
    """True when writing ``target`` means writing into an existing device or pipe."""
    if _DESCRIPTOR_PATH.match(os.path.normpath(os.path.abspath(target))):
        return True
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def check_writable(target: Path, *, force: bool) -> None:
    """Raise ExportError, before any work is done, if ``target`` cannot or must not be written."""
    _working_directory_for(target)
    parent = target.parent
    name_bytes, name_max = len(os.fsencode(target.name)), _name_max(parent)
    if name_bytes > name_max:
        raise ExportError(f"{target.name[:40]}...: the file name is {name_bytes} bytes, over this filesystem's "
                          f"{name_max}; choose a shorter name")
    if is_stream(target):
        return  # writing into a device or pipe replaces nothing: no --force needed
    try:
        mode = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None  # the parent checks below say what is wrong
        if os.path.islink(target) and not force:  # a dangling link: writing would meet it, not create the name
            raise ExportError(f"{target} is a symbolic link to {os.readlink(target)}, which does not exist; "
                              "pass --force to replace the link with the file, or choose another path") from None
    except OSError as exc:
        raise ExportError(f"cannot write {target}: {exc.strerror or exc}; choose another path") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise ExportError(f"{target} is a directory; give a file name such as {target / 'loader.toml'}")
    if mode is not None and not stat.S_ISREG(mode):
        kind = "block device" if stat.S_ISBLK(mode) else "socket" if stat.S_ISSOCK(mode) else "special file"
        raise ExportError(f"{target} is a {kind}; export to a regular file, a pipe or '-' (stdout)")
    if mode is not None and not force:
        raise ExportError(f"{target} already exists; pass --force to overwrite it or choose another path")
    if not parent.exists():
        raise ExportError(f"directory {parent} does not exist; create it first or choose another path")
    if not parent.is_dir():
        raise ExportError(f"{parent} is not a directory; choose another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ExportError(f"cannot write to directory {parent} (permission denied); choose another path")


def _working_directory_for(target: Path, option: str = "") -> None:
    """A relative ``target`` in a deleted working directory is one line, not a traceback from getcwd."""
    if target.is_absolute():
        return
    try:
        os.getcwd()
    except OSError as exc:
        reason = "it was deleted" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc))
        named = f"{option} {target}" if option else str(target)
        raise ExportError(f"{named}: the working directory cannot be used ({reason}); give an absolute path, or cd "
                          "to an existing directory and run it again") from None


def writable_folder(folder: Path, option: str) -> Path:
    """``folder``, created if missing (its parent must exist), where a file can be written: checked
    by creating one, so a read-only mount or a full disk is refused as root too. Raise ExportError
    naming ``option`` before any work is done."""
    folder = Path(folder)
    _working_directory_for(folder, option)
    created = False
    if folder.exists() and not folder.is_dir():
        raise ExportError(f"{option} {folder} is a file, not a folder; give a folder to write into")
    if not folder.exists():
        if not folder.parent.is_dir():
            raise ExportError(f"{option} {folder}: folder {folder.parent} does not exist; create it first or "
                              "choose another folder")
        try:
            folder.mkdir()
        except OSError as exc:
            raise ExportError(f"{option} {folder}: cannot create it: {exc.strerror or exc}; choose another "
                              "folder") from None
        created = True
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        if created:
            folder.rmdir()
        raise ExportError(f"{option} {folder}: cannot write into it: {exc.strerror or exc}; choose another "
                          "folder") from None
    return folder.resolve()


def write_text(target: Path, text: str, *, force: bool) -> None:
    """Write ``text`` to ``target`` as :func:`check_writable` allowed; raise ExportError on failure."""
    check_writable(target, force=force)
    if is_stream(target):
        _write_stream(target, text)
    else:
        _atomic_write(target, text, force=force)


def _write_stream(target: Path, text: str) -> None:
    if os.path.normpath(os.path.abspath(target)) in _STDOUT_PATHS:
        sys.stdout.write(text)  # the CLI's output policy applies (a closed reader, a full device)
        sys.stdout.flush()
        return
    try:
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise ExportError(f"cannot write {target}: {exc.strerror or exc}") from None


def _atomic_write(target: Path, text: str, *, force: bool) -> None:
    # the sibling keeps a prefix of the name: a legal 250-byte name must not give an illegal 264-byte one
    prefix = f".{target.name[:_TEMP_NAME_KEEP]}."
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise ExportError(f"cannot write to {target.parent}: {exc.strerror or exc}; choose another path") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(encodable(text))  # a command line's non-UTF-8 byte, escaped: UTF-8 cannot hold it
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp_name, _mode_to_keep(target))
        if force:
            os.replace(tmp_name, target)
        else:
            # link() fails if the target appeared meanwhile: never clobber without --force
            try:
                os.link(tmp_name, target)
            except FileExistsError:
                raise ExportError(f"{target} already exists; pass --force to overwrite it") from None
            except OSError:
                # filesystems without hard links: fall back to an exclusive create check + rename
                if target.exists():
                    raise ExportError(f"{target} already exists; pass --force to overwrite it") from None
                os.replace(tmp_name, target)
    except OSError as exc:
        raise ExportError(f"cannot write {target}: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)


def _mode_to_keep(target: Path) -> int:
    """The replaced file's permission bits (a symlink's target's), else :data:`NEW_FILE_MODE`."""
    try:
        st = os.stat(target)
    except OSError:
        return NEW_FILE_MODE
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else NEW_FILE_MODE


def _name_max(directory: Path) -> int:
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255
